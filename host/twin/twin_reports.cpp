// The protocol violations a PE's checks report (twin_checker.cpp, twin_order.cpp, twin_pipes.cpp,
// twin_engines.cpp): counted, the first few kept and printed, and grouped by kind, so that a second
// bug stays in sight behind hundreds of reports of the first (the counters file holds all three).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "twin_checker.h"
#include "twin_state.h"

namespace twin {
namespace {

constexpr size_t kMaxViolationExamples = 8;  // the first reports of any kind
constexpr size_t kMaxViolationKinds = 8;     // the first kinds, each with its count and first report

std::mutex g_violation_mu;
std::atomic<uint64_t> g_violations{0};
std::vector<std::string> g_violation_examples;
std::vector<ViolationKind> g_violation_kinds;

}  // namespace

// A report's kind: its text with every number but a source line ("kernel.cpp:187") made '#', so
// that one rule broken at one place is one kind whichever PE, core, slot or launch it names.
std::string kind_of(const std::string& msg) {
    std::string key;
    key.reserve(msg.size());
    for (size_t i = 0; i < msg.size();) {
        if (!isdigit(static_cast<unsigned char>(msg[i]))) {
            key += msg[i++];
            continue;
        }
        size_t j = i;
        while (j < msg.size() && isdigit(static_cast<unsigned char>(msg[j]))) ++j;
        const bool line = i >= 2 && msg[i - 1] == ':' && isalpha(static_cast<unsigned char>(msg[i - 2]));
        key += line ? msg.substr(i, j - i) : "#";
        i = j;
    }
    return key;
}

void report_violation(const std::string& msg) {
    g_violations.fetch_add(1, std::memory_order_relaxed);
    const std::string key = kind_of(msg);
    std::lock_guard<std::mutex> lk(g_violation_mu);
    bool new_kind = false;
    auto kind = std::find_if(g_violation_kinds.begin(), g_violation_kinds.end(),
                             [&key](const ViolationKind& k) { return k.key == key; });
    if (kind != g_violation_kinds.end()) {
        ++kind->count;
    } else if (g_violation_kinds.size() < kMaxViolationKinds) {
        g_violation_kinds.push_back(ViolationKind{key, 1, msg});
        new_kind = true;
    }
    const bool listed = g_violation_examples.size() < kMaxViolationExamples;
    if (listed) g_violation_examples.push_back(msg);
    if (listed || new_kind) fprintf(stderr, "twin: protocol violation: %s\n", msg.c_str());
}

uint64_t violation_count() { return g_violations.load(); }

std::vector<std::string> violation_examples() {
    std::lock_guard<std::mutex> lk(g_violation_mu);
    return g_violation_examples;
}

std::vector<ViolationKind> violation_kinds() {
    std::lock_guard<std::mutex> lk(g_violation_mu);
    return g_violation_kinds;
}

}  // namespace twin
