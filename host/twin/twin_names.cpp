// How the twin names what it reports: a HardEvent and the pipes it joins, a pipe, a UB range, a
// kernel call site, the calling PE and core (every violation and refusal is worded with these).
#include <cstdio>
#include <cstring>
#include <string>

#include "kernel_operator.h"
#include "twin_state.h"

namespace twin {
namespace {

constexpr int kEvents = int(AscendC::HardEvent::MAX);
const char* const kPipeName[kPipeCount] = {"S", "V", "MTE2", "MTE3"};

int pipe_of(const char* name, size_t n) {
    for (int p = 0; p < kPipeCount; ++p)
        if (strlen(kPipeName[p]) == n && strncmp(kPipeName[p], name, n) == 0) return p;
    return -1;  // M, MTE1, FIX: no UB ops of an AIV core
}

// (source pipe, destination pipe) of every HardEvent "SRC_DST", parsed once from its name;
// -1 for pipes the twin does not track.
struct EventPipes {
    int8_t src[kEvents], dst[kEvents];
    EventPipes() {
        for (int e = 0; e < kEvents; ++e) {
            const char* name = event_name(AscendC::HardEvent(e));
            const char* us = strchr(name, '_');
            src[e] = int8_t(us ? pipe_of(name, size_t(us - name)) : -1);
            dst[e] = int8_t(us ? pipe_of(us + 1, strlen(us + 1)) : -1);
        }
    }
};

}  // namespace

const char* event_name(AscendC::HardEvent e) {
    static const char* const names[] = {
        "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "M_V", "V_M", "V_V",
        "MTE3_MTE1", "MTE1_MTE3", "MTE1_V", "MTE2_M", "M_MTE2", "V_MTE1", "M_FIX", "FIX_M", "MTE3_MTE2", "MTE2_MTE3",
        "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S", "MTE2_FIX", "FIX_MTE2", "FIX_S", "M_S", "FIX_MTE3",
        "MTE1_FIX", "FIX_MTE1", "FIX_FIX"};
    const int i = int(e);
    return i >= 0 && i < kEvents ? names[i] : "?";
}

// Made once, before any core thread asks (every SetFlag and WaitFlag reads it).
const EventPipes kEventPipes;

void event_pipes(AscendC::HardEvent e, int* src, int* dst) {
    *src = kEventPipes.src[int(e)];
    *dst = kEventPipes.dst[int(e)];
}

const char* pipe_name(int pipe) { return pipe >= 0 && pipe < kPipeCount ? kPipeName[pipe] : "?"; }

std::string where() {
    char buf[64];
    snprintf(buf, sizeof buf, "PE %d core %d", pe_state().my_pe, current_core());
    return buf;
}

std::string range_text(uint32_t b, uint32_t e) {
    char buf[64];
    snprintf(buf, sizeof buf, "UB [%u, %u)", b, e);
    return buf;
}

std::string site_text(const Site& s) {
    std::string at = "?";
    if (s.file != nullptr) {  // the last two parts of the path: kernels/combine_kernel.cpp
        const std::string f = s.file;
        const size_t last = f.rfind('/');
        const size_t prev = last == std::string::npos || last == 0 ? std::string::npos : f.rfind('/', last - 1);
        at = (prev == std::string::npos ? f : f.substr(prev + 1)) + ":" + std::to_string(s.line);
    }
    return s.inside != nullptr ? std::string("inside ") + s.inside + " called at " + at : "at " + at;
}
}  // namespace twin
