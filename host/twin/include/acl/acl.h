// CPU twin of the ACL runtime calls the combine driver makes (combine-facts section 7).
// "Device" memory is host memory; a stream runs each launch to completion.
#pragma once

#include <cstddef>
#include <cstdint>

typedef int aclError;
typedef void* aclrtStream;
typedef enum { ACL_MEM_MALLOC_HUGE_FIRST = 0, ACL_MEM_MALLOC_HUGE_ONLY, ACL_MEM_MALLOC_NORMAL_ONLY } aclrtMemMallocPolicy;
typedef enum {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_DEVICE_TO_DEVICE
} aclrtMemcpyKind;

#define ACL_SUCCESS 0
#define ACL_ERROR_NONE 0
#define ACL_ERROR_BAD_ALLOC 200000
#define ACL_ERROR_INVALID_PARAM 100000

aclError aclInit(const char* config);
aclError aclFinalize();
aclError aclrtSetDevice(int32_t device);
aclError aclrtResetDevice(int32_t device);
aclError aclrtCreateStream(aclrtStream* stream);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtMalloc(void** ptr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocHost(void** ptr, size_t size);
aclError aclrtFree(void* ptr);
aclError aclrtFreeHost(void* ptr);
aclError aclrtMemcpy(void* dst, size_t dst_max, const void* src, size_t count, aclrtMemcpyKind kind);
aclError aclrtMemset(void* ptr, size_t max_count, int32_t value, size_t count);
const char* aclrtGetSocName();
