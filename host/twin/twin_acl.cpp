// The ACL runtime on the twin: device memory is host memory, streams are synchronous
// (a twin launch runs to completion before it returns), and the device's facts are those
// of the SoC the twin models (COMBINE_TWIN_SOC; the table is twin_socs.h, read by twin_core.cpp).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "acl/acl.h"
#include "twin_state.h"

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

// The SoC the twin models (COMBINE_TWIN_SOC, default Ascend910B3): a driver that picks its cycles
// per microsecond by the name (50 on A2/A3, 1000 on Ascend950) reads the twin's cycles right.
const char* aclrtGetSocName() { return twin::twin_soc().name; }
