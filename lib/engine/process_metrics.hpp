#pragma once
/// Every event listener of the process, for process_metrics() and the
/// metrics endpoint's pages, and the modules' parts of those pages (an rpc
/// server's methods). Locked when an event listener starts or goes and by
/// a page or a snapshot: never per operation.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <string_view>

#include <memory>
#include <vector>

#include <cordma/event_listener.hpp>
#include <cordma/metrics.hpp>

namespace cordma::detail {

/// An event listener's connections join the process's (at its start) and
/// leave them (at its end: their counts stay in the process's closed
/// totals).
void enlist(event_listener* listener);
void delist(event_listener* listener) noexcept;

/// The event listeners of the process now (for process_stuck), each kept
/// alive by the pointer returned.
std::vector<std::shared_ptr<event_listener>> process_event_listeners();

/// Appends the counters of every port of `device` (read now; a port whose
/// counters cannot be read is left out) to `out`: metrics_snapshot::devices.
void add_device_counters(const device_context& device, std::vector<device_counters>& out) noexcept;

/// A module's part of the endpoint's pages, one per module (not per
/// object: a module renders all of its objects at once, so each family
/// appears once). Both are called on the endpoint's thread, holding no
/// lock of the engine's: they take their own.
struct metrics_section {
    /// Appends the module's families (HELP, TYPE, samples).
    void (*prometheus)(std::string& out);
    /// Appends the module's JSON members ("name":value, comma-separated,
    /// without a leading comma), or nothing.
    void (*json)(std::string& out);
};
/// Adds `section` to every page from now on (a module calls it once).
void add_metrics_section(metrics_section section);

/// A Prometheus label value, escaped (backslash, quote, newline), and a
/// JSON string, quoted and escaped, appended to `out`: for the sections,
/// rendered as the engine's own families are.
std::string prometheus_label(std::string_view value);
void json_string(std::string& out, std::string_view value);
/// A family's two header lines, "# HELP name help" and "# TYPE name
/// type" (counter, gauge), appended to `out`; its samples follow.
void prometheus_family(std::string& out, std::string_view name, std::string_view type, std::string_view help);

/// A family each of whose samples is one object's value: a table of these
/// (an rpc server's methods, the shared receive queues) renders through
/// prometheus_table.
template <class T>
struct value_family {
    const char* name;
    const char* type;  // "counter" or "gauge"
    const char* help;
    std::uint64_t (*value)(const T& item);
};
/// Appends each family of `families` (its HELP and TYPE) and a sample per
/// item: `name{labels} value`, the labels already escaped.
template <class T, std::size_t N>
void prometheus_table(std::string& out, const value_family<T> (&families)[N],
                      const std::vector<std::pair<std::string, const T*>>& items) {
    for (const value_family<T>& f : families) {
        prometheus_family(out, f.name, f.type, f.help);
        for (const auto& [labels, item] : items)
            out.append(f.name).append("{").append(labels).append("} ").append(std::to_string(f.value(*item))).append(
                "\n");
    }
}

/// The pages the endpoint serves: process_metrics() rendered, followed by
/// each module's section.
std::string process_prometheus(const prometheus_options& options);
std::string process_json();

}  // namespace cordma::detail
