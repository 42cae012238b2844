// Receiver side of the protocol checker (docs/hardware-rules.md#17-payload-reads-after-their-flag):
// a core of PE p reads a payload row only after the status slot that covers it was observed ready
// on PE p in the same launch. Per payload region of this PE (a process): per row, the launch in
// which a core of this PE observed its slot ready (a satisfied wait or test), and the first read
// of the row in a launch before any such observation (core, operation, call site). Lenient across
// cores: an observation by any core of the PE before the read counts (the docs leave open how a
// flag one core saw orders another core's read). The check runs once every PE's puts of a launch
// have landed (the next launch's start, or the counters' dump after the last one), on the rows
// whose slot a status put made ready in that launch: rows of masked slots are no payload.
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "twin_state.h"

namespace twin {
namespace {

struct Row {
    uint32_t observed = 0;  // launch in which a core of this PE observed the row's slot ready
    uint32_t early = 0;     // launch in which a core read the row before that
    int core = -1;          // the first such read: its core, operation and call site
    const char* op = "";
    Site site{};
};

struct Waits {
    uint32_t launch = 0;
    std::vector<Site> sites;  // distinct call sites of this PE's satisfied status waits in it
};

constexpr size_t kMaxWaitSites = 3;

std::mutex g_mu;
std::vector<std::vector<Row>> g_rows;  // by receive id, then row
Waits g_waits;

bool same_site(const Site& a, const Site& b) {
    return a.line == b.line && std::string(a.file ? a.file : "") == (b.file ? b.file : "");
}

std::string wait_sites_text() {
    if (g_waits.sites.empty()) return "no core of this PE waited on a status slot in that launch";
    std::string s = "this PE's status waits in that launch were ";
    for (size_t i = 0; i < g_waits.sites.size(); ++i) s += (i ? ", " : "") + site_text(g_waits.sites[i]);
    return s;
}

}  // namespace

int receive_label_payload(uint64_t rows) {
    std::lock_guard<std::mutex> lk(g_mu);
    g_rows.emplace_back(rows);
    return int(g_rows.size()) - 1;
}

void receive_observed(int id, uint64_t row, uint32_t launch, const Site& site) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (id < 0 || size_t(id) >= g_rows.size() || row >= g_rows[id].size()) return;
    g_rows[id][row].observed = launch;
    if (g_waits.launch != launch) g_waits = Waits{launch, {}};
    const Site plain{site.file, site.line, nullptr};
    for (const Site& s : g_waits.sites)
        if (same_site(s, plain)) return;
    if (g_waits.sites.size() < kMaxWaitSites) g_waits.sites.push_back(plain);
}

void receive_read(int id, uint64_t first, uint64_t last, uint32_t launch, const char* op, const Site& site) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (id < 0 || size_t(id) >= g_rows.size()) return;
    std::vector<Row>& rows = g_rows[id];
    for (uint64_t r = first; r <= last && r < rows.size(); ++r) {
        Row& row = rows[r];
        if (row.observed == launch || row.early == launch) continue;
        row.early = launch;
        row.core = current_core();
        row.op = op;
        row.site = Site{site.file, site.line, nullptr};
    }
}

void receive_check(int id, uint64_t slot, uint64_t row, uint32_t launch, int writer) {
    Row r;
    std::string waits;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (id < 0 || size_t(id) >= g_rows.size() || row >= g_rows[id].size()) return;
        r = g_rows[id][row];
        waits = g_waits.launch == launch ? wait_sites_text()
                                         : "no core of this PE waited on a status slot in that launch";
    }
    const int me = pe_state().my_pe;
    char buf[720];
    if (r.early == launch) {
        snprintf(buf, sizeof buf, "PE %d core %d: %s %s read payload row %llu (status slot %llu) in launch %u "
                 "before any core of PE %d observed that slot ready in this launch: the NPU does not order the row's "
                 "landing before a read that did not observe its flag (wait for the slot first, "
                 "docs/hardware-rules.md#17-payload-reads-after-their-flag)", me, r.core, r.op,
                 site_text(r.site).c_str(), (unsigned long long)row, (unsigned long long)slot, launch, me);
    } else if (r.observed != launch) {
        snprintf(buf, sizeof buf, "PE %d: status slot %llu (payload row %llu) was made ready in launch %u by PE %d's "
                 "status put, but no core of PE %d observed it ready in that launch (%s): a read of the row (the twin "
                 "does not see scalar loads) is not ordered after its landing (wait for the slot of every row read, "
                 "docs/hardware-rules.md#17-payload-reads-after-their-flag)", me, (unsigned long long)slot,
                 (unsigned long long)row, launch, writer, me, waits.c_str());
    } else {
        return;
    }
    report_violation(buf);
}

}  // namespace twin
