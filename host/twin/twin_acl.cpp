// The ACL runtime on the twin: device memory is host memory, streams are synchronous
// (a twin launch runs to completion before it returns), and the device's facts are those
// of the SoC the twin models (COMBINE_TWIN_SOC; docs/hardware-rules.md#9-cores-waves-and-barriers).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "acl/acl.h"
#include "twin_state.h"

namespace twin {

namespace {
// AIV cores and UB per AIV of the SoCs the twin models (docs/hardware-rules.md#9-cores-waves-and-barriers:
// 910B3/B4 40 AIV, 910B2 48, each 910_93 die 48; UB 192 KiB on A2/A3).
struct SocRow {
    const char* prefix;
    bool exact;
    int aiv;
};
constexpr SocRow kSocs[] = {
    {"Ascend910B2", true, 48},
    {"Ascend910B3", true, 40},
    {"Ascend910B4", true, 40},
    {"Ascend910_93", false, 48},
};
}  // namespace

const TwinSoc& twin_soc() {
    static const TwinSoc soc = [] {
        const char* env = getenv("COMBINE_TWIN_SOC");
        const char* name = env && *env ? env : kDefaultSoc;
        for (const SocRow& r : kSocs) {
            const bool hit = r.exact ? strcmp(name, r.prefix) == 0 : strncmp(name, r.prefix, strlen(r.prefix)) == 0;
            if (hit) return TwinSoc{name, r.aiv, kUbBytesA2A3};
        }
        fprintf(stderr, "twin: COMBINE_TWIN_SOC=%s: the twin models Ascend910B2 (48 AIV), Ascend910B3 and "
                        "Ascend910B4 (40 AIV) and Ascend910_93xx (48 AIV per die)\n", name);
        exit(1);
    }();
    return soc;
}

}  // namespace twin

aclError aclInit(const char*) { return ACL_SUCCESS; }
aclError aclFinalize() { return ACL_SUCCESS; }
aclError aclrtSetDevice(int32_t device) { return device < 0 ? ACL_ERROR_INVALID_PARAM : ACL_SUCCESS; }
aclError aclrtResetDevice(int32_t) { return ACL_SUCCESS; }

aclError aclrtCreateStream(aclrtStream* stream) {
    static int token;
    *stream = &token;
    return ACL_SUCCESS;
}
aclError aclrtDestroyStream(aclrtStream) { return ACL_SUCCESS; }
aclError aclrtSynchronizeStream(aclrtStream) { return ACL_SUCCESS; }
// A twin launch has run to completion when it returns: there is nothing left to wait for.
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream, int32_t timeout) {
    return timeout < -1 ? ACL_ERROR_INVALID_PARAM : ACL_SUCCESS;
}

aclError aclrtMalloc(void** ptr, size_t size, aclrtMemMallocPolicy) {
    *ptr = nullptr;
    if (posix_memalign(ptr, 512, size ? size : 1) != 0) return ACL_ERROR_BAD_ALLOC;
    return ACL_SUCCESS;
}
aclError aclrtMallocHost(void** ptr, size_t size) { return aclrtMalloc(ptr, size, ACL_MEM_MALLOC_NORMAL_ONLY); }
aclError aclrtFree(void* ptr) {
    free(ptr);
    return ACL_SUCCESS;
}
aclError aclrtFreeHost(void* ptr) { return aclrtFree(ptr); }

aclError aclrtMemcpy(void* dst, size_t dst_max, const void* src, size_t count, aclrtMemcpyKind) {
    if (count > dst_max) return ACL_ERROR_INVALID_PARAM;
    if (count) memcpy(dst, src, count);
    return ACL_SUCCESS;
}
aclError aclrtMemset(void* ptr, size_t max_count, int32_t value, size_t count) {
    if (count > max_count) return ACL_ERROR_INVALID_PARAM;
    memset(ptr, value, count);
    return ACL_SUCCESS;
}

aclError aclrtGetDeviceInfo(uint32_t, aclrtDevAttr attr, int64_t* value) {
    if (value == nullptr) return ACL_ERROR_INVALID_PARAM;
    switch (attr) {
        case ACL_DEV_ATTR_VECTOR_CORE_NUM: *value = twin::twin_soc().aiv; return ACL_SUCCESS;
        case ACL_DEV_ATTR_AICORE_CORE_NUM:
        case ACL_DEV_ATTR_CUBE_CORE_NUM: *value = twin::twin_soc().aiv / 2; return ACL_SUCCESS;
        case ACL_DEV_ATTR_UBUF_PER_VECTOR_CORE: *value = int64_t(twin::twin_soc().ub_bytes); return ACL_SUCCESS;
        default: return ACL_ERROR_INVALID_PARAM;
    }
}

// Profiling on the twin counts nanoseconds: perf rows divide by 1000 "cycles" per us.
const char* aclrtGetSocName() { return "CPU-twin"; }
