// For the NPU-branch compile check only (force-included): checks a kernel launch's
// arguments against the entry's parameters, where bisheng would parse <<<>>>.
#pragma once

#include <cstdint>
#include <type_traits>

template <class F>
struct combine_entry_params;
template <class... P>
struct combine_entry_params<void(P...)> {
    template <class... A>
    static constexpr bool accepts() {
        if constexpr (sizeof...(P) != sizeof...(A)) {
            return false;
        } else {
            return (std::is_convertible_v<A, P> && ...);
        }
    }
};

template <class F, class... A>
void combine_syntax_check_launch(uint32_t block_dim, void* stream, A&&... args) {
#if !defined(__CUDA_ARCH__)  // host code: its arguments are host values
    static_assert(combine_entry_params<F>::template accepts<A...>(),
                  "the launch's arguments do not match the kernel entry's parameters");
#endif
    (void)block_dim;
    (void)stream;
    ((void)args, ...);
}
