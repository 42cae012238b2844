// The protocol checker's side of the two data planes (twin_checker.cpp), as the put and quiet
// calls and the launch counters of twin_engines.cpp use it. Internal to the twin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "twin_state.h"

namespace twin {

// A payload put is issued: its slots remember the plane and launch, for the report of a flag that
// lands before it.
void note_issue(const Put& p);
// The payload slots `p` (one MTE leg, or one SDMA call) writes are delivered once what completes
// op `seq` of its engine on this core has run (twin_order.cpp).
void note_delivery(const Put& p, uint64_t seq, const Site& site);
// The segment variant's rule for a put into PE `pe`'s layout by expert (a violation when broken).
void check_layout_put(const void* dst_sym, int pe, size_t bytes, const char* op, const Site& site);
// A status put to `dst_sym` on PE `pe` at `site`: its payload must be delivered (twin_order.cpp).
void check_status_order(const void* dst_sym, int pe, const Site& site);

// Launch `launch` (1-based, the same on every PE) begins: the receiver check of the one before it,
// the happens-before shadows, and the status slots that still hold an earlier launch's flag.
void checker_begin_launch(uint32_t launch);
// The launch in progress ends: status slots waited on at fewer than all of their words.
void checker_end_launch();
// The receiver check of the launch in progress (the host has passed its barrier after it).
void checker_flush();
// Protocol violations so far, and the first few (kept for the counters file).
uint64_t violation_count();
std::vector<std::string> violation_examples();
// The first few kinds of report (a report's text, its numbers but source lines made '#'): how many
// of each, and the first.
struct ViolationKind {
    std::string key;
    uint64_t count;
    std::string example;
};
std::vector<ViolationKind> violation_kinds();

}  // namespace twin
