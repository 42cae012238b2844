// What a driver process needs so that nothing hangs and nothing outlives its launcher: dying with
// the launcher, the wait timeout the launcher sets, and SHMEM's host barrier behind a watchdog.
// Header-only; both drivers (host/combine_host.cpp, host/probe_host.cpp) use it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "shmem.h"

namespace host_guard {

constexpr int kTimedOutExit = 7;

// Killed when the launcher dies (prctl); not started when it is already gone
// (COMBINE_LAB_LAUNCHER_PID names it, combine_lab/run/launch.py).
inline bool watch_launcher(const char* program) {
#if defined(__linux__)
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // not SIGKILL: the twin's PE drops its segment's name first (twin_heap.cpp)
#endif
    const char* env = getenv("COMBINE_LAB_LAUNCHER_PID");
    const long want = env && *env ? strtol(env, nullptr, 10) : 0;
    if (want > 0 && long(getppid()) != want) {
        fprintf(stderr, "%s: launcher %ld is gone (parent is now %ld): not starting\n", program, want, long(getppid()));
        return false;
    }
    return true;
}

// Seconds any one wait may last (COMBINE_WAIT_TIMEOUT_S, set by the launcher; default 60).
inline double wait_timeout_s() {
    const char* env = getenv("COMBINE_WAIT_TIMEOUT_S");
    const double v = env && *env ? atof(env) : 0.0;
    return v > 0 ? v : 60.0;
}

// aclshmem_barrier_all has no timeout: a watchdog ends this PE (status 7), saying so, when the
// barrier lasts longer than `seconds`.
inline void timed_barrier_all(const char* program, int pe, double seconds, const char* when) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread dog([&] {
        std::unique_lock<std::mutex> lk(mu);
        if (cv.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return done; })) return;
        fprintf(stderr, "%s: PE %d: timed out after %.1f s in the barrier of all PEs %s (aclshmem_barrier_all): "
                        "a PE did not arrive (it failed or was killed)\n", program, pe, seconds, when);
        fflush(stderr);
        _exit(kTimedOutExit);
    });
    aclshmem_barrier_all();
    {
        std::lock_guard<std::mutex> lk(mu);
        done = true;
    }
    cv.notify_all();
    dog.join();
}

}  // namespace host_guard
