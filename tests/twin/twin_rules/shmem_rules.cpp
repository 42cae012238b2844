// SHMEM's put paths on one twin PE (tests/twin/test_twin_vector_rules.py): what UB a kernel may give
// them. `shmem_rules <case>` boots a one-PE SHMEM (COMBINE_TWIN_SESSION names its segment), runs
// the case on one core and prints "ok" with the bytes that arrived; a fatal rule ends the
// process with status 3 and the message on stderr.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "kernel_operator.h"
#include "shmem.h"
#include "twin_platform.h"

namespace {

constexpr uint32_t kRow = 200 * 1024;  // bytes: more than one 190 KiB chunk

// `ub_off`/`ub_bytes`: the staging buffer the GM -> UB -> GM put is given; then the 32 B ready
// block at UB offset 32 goes out UB -> GM, and an SDMA put uses 64 B of scratch at `sdma_off`
// (the reference's map: staging 190 KiB at 64, status block at 32, SDMA scratch at 191 KiB).
// UB pointers are byte offsets, as a kernel writes them (`(__ubuf__ int32_t*)32`).
void stage(uint8_t* window, const uint8_t* src, uint32_t ub_off, uint32_t ub_bytes, uint32_t sdma_off) {
    int32_t* gm_src = const_cast<int32_t*>(reinterpret_cast<const int32_t*>(src));
    aclshmemx_mte_put_nbi<int32_t>(reinterpret_cast<int32_t*>(window), gm_src, (__ubuf__ int32_t*)(uintptr_t)ub_off,
                                   ub_bytes, kRow / 4, 0, EVENT_ID1);
    aclshmem_quiet();
    __ubuf__ int32_t* block = (__ubuf__ int32_t*)32;
    for (int i = 0; i < 8; ++i) block[i] = 1;
    AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID1);
    AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID1);
    aclshmemx_mte_put_nbi<int32_t>(reinterpret_cast<int32_t*>(window + kRow), block, 8, 0, EVENT_ID1);
    aclshmem_quiet();
    aclshmemx_sdma_put_nbi<int32_t>(reinterpret_cast<int32_t*>(window + kRow + 64), gm_src,
                                    (__ubuf__ int32_t*)(uintptr_t)sdma_off, 64, 1024, 0, EVENT_ID0);
    aclshmemx_sdma_quiet<int32_t>((__ubuf__ int32_t*)(uintptr_t)sdma_off, 64, EVENT_ID0);
}

const std::map<std::string, std::pair<uint32_t, uint32_t>> kCases = {
    {"stage_190k_at_64", {64, 190 * 1024}},     // up to 190 KiB + 64: below the 192 KiB UB
    {"stage_past_ub", {64, 192 * 1024}},        // [64, 192 KiB + 64): past it
};

}  // namespace

// `alloc`: the heap's guarantees, as SHMEM's (16 B from aclshmem_malloc, a power of two from
// aclshmem_align): each allocation's offset from the first, or -1 for nullptr.
void allocations() {
    const auto* first = static_cast<uint8_t*>(aclshmem_malloc(20));
    const auto at = [first](void* p) { return p ? (long long)(static_cast<uint8_t*>(p) - first) : -1LL; };
    void* a = aclshmem_malloc(64);        // right after 20 B rounded up to 32
    void* b = aclshmem_align(64, 100);    // the next multiple of 64
    void* c = aclshmem_align(48, 64);     // not a power of two
    void* d = aclshmem_align(64, 0);      // nothing to allocate
    void* e = aclshmem_malloc(1);
    printf("alloc 0 %lld %lld %lld %lld %lld\n", at(a), at(b), at(c), at(d), at(e));
}

int main(int argc, char** argv) {
    const bool alloc = argc == 2 && std::string(argv[1]) == "alloc";
    if (argc != 2 || (kCases.count(argv[1]) == 0 && !alloc)) {
        fprintf(stderr, "usage: shmem_rules stage_190k_at_64|stage_past_ub|alloc\n");
        return 2;
    }
    const uint32_t ub_off = alloc ? 0 : kCases.at(argv[1]).first, ub_bytes = alloc ? 0 : kCases.at(argv[1]).second;
    aclshmemx_init_attr_t attr{};
    attr.my_pe = 0;
    attr.n_pes = 1;
    snprintf(attr.ip_port, sizeof attr.ip_port, "tcp://127.0.0.1:1");
    attr.local_mem_size = 2u << 20;
    attr.option_attr.data_op_engine_type = static_cast<data_op_engine_type_t>(ACLSHMEM_DATA_OP_MTE | ACLSHMEM_DATA_OP_SDMA);
    if (aclshmemx_init_attr(ACLSHMEMX_INIT_WITH_DEFAULT, &attr) != 0) return 5;
    if (alloc) {
        allocations();
        aclshmem_finalize();
        return 0;
    }
    uint8_t* window = static_cast<uint8_t*>(aclshmem_malloc(kRow + 64 + 4096));
    std::vector<uint8_t> src(kRow);
    for (uint32_t i = 0; i < kRow; ++i) src[i] = uint8_t(i * 7 + 1);
    memset(window, 0, kRow + 64 + 4096);
    twin::launch_kernel(1, nullptr, [&]() { stage(window, src.data(), ub_off, ub_bytes, 191 * 1024); });
    const bool row = memcmp(window, src.data(), kRow) == 0;
    const bool sdma = memcmp(window + kRow + 64, src.data(), 4096) == 0;
    int ready = 0;
    for (int i = 0; i < 8; ++i) ready += reinterpret_cast<int32_t*>(window + kRow)[i];
    printf("%s row %d ready %d sdma %d\n", row && sdma && ready == 8 ? "ok" : "bad", int(row), ready, int(sdma));
    aclshmem_finalize();
    return 0;
}
