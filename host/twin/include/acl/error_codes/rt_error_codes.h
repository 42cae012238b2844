// CPU twin of the runtime's error codes (hicann/runtime include/external/acl/error_codes/
// rt_error_codes.h): the values the driver tells apart.
#pragma once

// aclrtSynchronizeStreamWithTimeout: the stream had not finished in time.
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046
