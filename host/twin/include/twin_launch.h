// bisheng's kernel launch on the twin. A twin build compiles a copy of each kernel source in which
// every `K<<<block_dim, l2ctrl, stream>>>(args...)` reads `::twin::kernel_launch(K, block_dim,
// l2ctrl, stream)(args...)` (cmake/twin_launch.py; nothing else of the source changes, and the
// copy's #line names the source's own lines). The launch runs K on block_dim blocks of the SoC's
// AIV cores, each a thread that calls K(args...) with its own copy of the arguments, as a
// __global__ function takes them by value, and returns when every block has ended: the stream
// is synchronous (twin_kernel.cpp).
#pragma once

#include <cstdint>

#include "twin_platform.h"

namespace twin {

template <typename F>
struct KernelLaunch {
    F* kernel;
    uint32_t block_dim;
    void* stream;
    template <typename... Args>
    void operator()(Args&&... args) const {
        launch_kernel(block_dim, stream, [&]() { kernel(args...); });
    }
};

// l2ctrl (SHMEM's examples pass nullptr) configures the NPU's L2 cache: nothing to do on the twin.
template <typename F>
KernelLaunch<F> kernel_launch(F* kernel, uint32_t block_dim, void* l2ctrl, void* stream) {
    (void)l2ctrl;
    return KernelLaunch<F>{kernel, block_dim, stream};
}

}  // namespace twin
