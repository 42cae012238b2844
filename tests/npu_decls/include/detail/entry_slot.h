// One kernel entry's worth of __aicore__ definitions on the push_macro stack (see
// ../kernel_operator.h): pushed bottom first, the device definition, then the one an entry's
// __aicore__ gets, which expands to nothing and pops the device definition back.
// No include guard: kernel_operator.h includes this once per entry a file may hold.
#undef __aicore__
#define __aicore__ __attribute__((device))
#pragma push_macro("__aicore__")
#undef __aicore__
#define __aicore__ _Pragma("pop_macro(\"__aicore__\")")
#pragma push_macro("__aicore__")
