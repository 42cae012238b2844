// Declaration-only stand-in for the runtime's error codes (hicann/runtime
// include/external/acl/error_codes/rt_error_codes.h, installed as acl/error_codes/): the
// aclError values the driver tells apart. For the NPU-branch compile check only.
#pragma once

// What aclrtSynchronizeStreamWithTimeout returns when the stream has not finished in time.
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046
