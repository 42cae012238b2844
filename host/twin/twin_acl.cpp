// The ACL runtime on the twin: device memory is host memory, streams are synchronous
// (a twin launch runs to completion before it returns).
#include <cstdlib>
#include <cstring>

#include "acl/acl.h"

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

const char* aclrtGetSocName() { return "CPU-twin"; }
