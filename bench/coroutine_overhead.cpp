// coroutine_overhead: what cordma's coroutine machinery costs per operation,
// with no RDMA device.
//
// A fake completion queue (a ring of ibv_wc) stands in for the CQ, and a
// drain loop shaped like event_listener::drain stands in for the listener:
// poll up to 32 work completions, cast each wr_id back to a
// detail::completion_target and call its on_complete. What differs between
// the variants is what on_complete does and who posts the next operation:
//
//   callback        a plain function pointer: on_complete does the work and
//                   posts the next operation itself. The floor.
//   task+awaiter    a task<void> loops on `co_await fake_op`; the awaiter is
//                   the completion target, on_complete resumes the coroutine.
//   task+slot       as cordma's connection does it: wr_id points to a
//                   preallocated work slot taken from a free list, the slot
//                   points to the awaiter, completion frees the slot and
//                   resumes. This is "one awaited cordma operation" minus
//                   the verbs calls.
//   task+slot+mr    task+slot, plus the buffer ownership a real operation
//                   carries: a local_slice copied into the operation, moved
//                   into the slot, released on completion (shared_ptr
//                   reference counts, as connection::write does).
//   task per op     each operation wrapped in its own task (co_await
//                   one_op()): what a user pays for a helper coroutine per
//                   operation, one frame allocation each.
//
// Each runs with 1 and with 64 operations outstanding (coroutines). Reported:
// ns per operation (best of several runs), heap allocations per operation
// (global operator new, counted), and the ratio to the callback.
//
// Usage: coroutine_overhead [--iterations N] [--runs N] [--only VARIANT] [--depth N] [--json]
//   --only and --depth run one variant at one depth, e.g. under
//   valgrind --tool=callgrind to count instructions per operation.

#include <algorithm>
#include <array>
#include <chrono>
#include <charconv>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <infiniband/verbs.h>

#include <cordma/local_mr.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/detail/completion_target.hpp>

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "../tests/support/allocation_counter.hpp"

using cordma::task;
using cordma::detail::completion_target;

namespace {

/// Stops the optimiser from dropping a value it can see is unused.
template <class T>
void keep(const T& value) {
    asm volatile("" : : "r,m"(value) : "memory");
}

/// Stands in for a completion queue: post() is the NIC writing a CQE,
/// poll() is ibv_poll_cq copying them out.
class fake_completion_queue {
public:
    void post(completion_target* target, std::uint32_t byte_len) noexcept {
        ibv_wc& wc = ring_[tail_++ & mask];
        wc.wr_id = target->as_wr_id();
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = IBV_WC_RDMA_WRITE;
        wc.byte_len = byte_len;
        wc.wc_flags = 0;
    }

    int poll(std::span<ibv_wc> out) noexcept {
        std::size_t n = std::min<std::size_t>(out.size(), tail_ - head_);
        for (std::size_t i = 0; i < n; ++i)
            out[i] = ring_[head_++ & mask];
        return static_cast<int>(n);
    }

private:
    static constexpr std::size_t capacity = 4096;  // more than any depth here
    static constexpr std::size_t mask = capacity - 1;
    std::array<ibv_wc, capacity> ring_{};
    std::size_t head_ = 0;
    std::size_t tail_ = 0;
};

/// The listener's inner loop (event_listener::drain), until `finished`
/// reaches `expected`.
void drain(fake_completion_queue& cq, const unsigned& finished, unsigned expected) {
    std::array<ibv_wc, 32> wcs;
    while (finished < expected) {
        int n = cq.poll(wcs);
        for (int i = 0; i < n; ++i) {
            auto* target = completion_target::from_wr_id(wcs[i].wr_id);
            target->on_complete(target, wcs[i]);
        }
    }
}

// ---------------------------------------------------------------------------
// Variant: callback

struct callback_operation : completion_target {
    fake_completion_queue* cq = nullptr;
    std::uint64_t remaining = 0;
    std::uint64_t checksum = 0;
    unsigned* finished = nullptr;

    static void complete(completion_target* self, const ibv_wc& wc) noexcept {
        auto* op = static_cast<callback_operation*>(self);
        op->checksum += wc.byte_len;
        if (--op->remaining > 0)
            op->cq->post(op, static_cast<std::uint32_t>(op->remaining));
        else
            ++*op->finished;
    }
};

// ---------------------------------------------------------------------------
// Variant: task + awaiter (the awaiter is the completion target)

class direct_operation : completion_target {
public:
    direct_operation(fake_completion_queue& cq, std::uint32_t length) noexcept : cq_(&cq), length_(length) {
        on_complete = &complete;
    }
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept {
        continuation_ = h;
        cq_->post(this, length_);
    }
    std::uint32_t await_resume() const noexcept { return byte_len_; }

private:
    static void complete(completion_target* self, const ibv_wc& wc) noexcept {
        auto* op = static_cast<direct_operation*>(self);
        op->byte_len_ = wc.byte_len;
        op->continuation_.resume();
    }

    fake_completion_queue* cq_;
    std::uint32_t length_;
    std::uint32_t byte_len_ = 0;
    std::coroutine_handle<> continuation_;
};

// ---------------------------------------------------------------------------
// Variant: task + work slot (cordma's shape: wr_id -> slot -> operation)

struct slot_operation_base;

struct work_slot : completion_target {
    slot_operation_base* op = nullptr;
    work_slot* next_free = nullptr;
    std::shared_ptr<cordma::detail::mr_block> keep_alive;
};

/// Preallocated slots and a free list, as detail::connection_state keeps.
class slot_pool {
public:
    explicit slot_pool(std::size_t n) : slots_(n) {
        for (std::size_t i = n; i-- > 0;) {
            slots_[i].on_complete = &complete;
            slots_[i].next_free = free_;
            free_ = &slots_[i];
        }
    }
    work_slot* take() noexcept {
        work_slot* s = free_;
        free_ = s->next_free;
        return s;
    }
    void give_back(work_slot* s) noexcept {
        s->next_free = free_;
        free_ = s;
    }

private:
    static void complete(completion_target* self, const ibv_wc& wc) noexcept;
    std::vector<work_slot> slots_;
    work_slot* free_ = nullptr;
    friend struct slot_operation_base;
};

struct slot_operation_base {
    slot_pool* pool;
    fake_completion_queue* cq;
    work_slot* slot = nullptr;
    cordma::local_slice local;  // empty unless the variant carries a buffer
    std::coroutine_handle<> continuation;
    bool done = false;
    std::uint32_t length = 0;
    std::uint32_t byte_len = 0;
};

void slot_pool::complete(completion_target* self, const ibv_wc& wc) noexcept {
    auto* slot = static_cast<work_slot*>(self);
    slot_operation_base* op = slot->op;
    slot->keep_alive.reset();
    slot->op = nullptr;
    op->slot = nullptr;
    op->done = true;
    op->byte_len = wc.byte_len;
    // The owner is recovered through the slot in cordma; here the pool is
    // one global per run, reached through the operation.
    op->pool->give_back(slot);
    op->continuation.resume();
}

/// What connection::write builds: the operation lives in the awaiting
/// frame; posting takes a slot and hands it the buffer ownership.
class slot_operation : slot_operation_base {
public:
    slot_operation(slot_pool& pool, fake_completion_queue& cq, const cordma::local_slice& local,
                   std::uint32_t length) noexcept
        : slot_operation_base{&pool, &cq, nullptr, local, {}, false, length, 0} {}
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept {
        continuation = h;
        slot = pool->take();
        slot->op = this;
        slot->keep_alive = std::move(const_cast<std::shared_ptr<cordma::detail::mr_block>&>(local.block()));
        cq->post(slot, length);
    }
    std::uint32_t await_resume() const noexcept { return byte_len; }
};

// ---------------------------------------------------------------------------
// The coroutines

enum class variant { callback, direct, slot, slot_mr, task_per_op };

const char* name_of(variant v) {
    switch (v) {
    case variant::callback: return "callback";
    case variant::direct: return "task+awaiter";
    case variant::slot: return "task+slot";
    case variant::slot_mr: return "task+slot+mr";
    case variant::task_per_op: return "task per op";
    }
    return "?";
}

struct run_state {
    fake_completion_queue cq;
    slot_pool slots{256};
    cordma::local_slice buffer;  // for task+slot+mr
    unsigned finished = 0;
    std::uint64_t checksum = 0;
};

task<void> direct_worker(run_state& s, std::uint64_t n) {
    std::uint64_t sum = 0;
    for (std::uint64_t i = 0; i < n; ++i)
        sum += co_await direct_operation(s.cq, static_cast<std::uint32_t>(i));
    s.checksum += sum;
    ++s.finished;
}

task<void> slot_worker(run_state& s, std::uint64_t n, bool with_buffer) {
    std::uint64_t sum = 0;
    cordma::local_slice none;
    for (std::uint64_t i = 0; i < n; ++i)
        sum += co_await slot_operation(s.slots, s.cq, with_buffer ? s.buffer : none, static_cast<std::uint32_t>(i));
    s.checksum += sum;
    ++s.finished;
}

task<std::uint32_t> one_op(run_state& s, std::uint32_t length) {
    co_return co_await direct_operation(s.cq, length);
}

task<void> task_per_op_worker(run_state& s, std::uint64_t n) {
    std::uint64_t sum = 0;
    for (std::uint64_t i = 0; i < n; ++i)
        sum += co_await one_op(s, static_cast<std::uint32_t>(i));
    s.checksum += sum;
    ++s.finished;
}

struct measurement {
    variant kind;
    unsigned depth;
    double best_ns = 0;
    double median_ns = 0;
    double allocations_per_op = 0;
};

/// One run of `ops` operations over `depth` concurrent workers; returns the
/// seconds the drain loop took and adds the allocations it made to `allocs`.
double run_once(variant kind, unsigned depth, std::uint64_t ops, std::uint64_t& allocs) {
    auto state = std::make_unique<run_state>();
    state->buffer = cordma::local_slice(std::make_shared<cordma::detail::mr_block>(), nullptr, 0);
    std::uint64_t per_worker = ops / depth;
    std::vector<callback_operation> callbacks(depth);

    // Start every worker: each runs to its first suspension, which posts its
    // first operation. Starting allocates the workers' frames (and the
    // detached drivers'): set-up, outside what is counted and timed.
    for (unsigned w = 0; w < depth; ++w) {
        switch (kind) {
        case variant::callback:
            callbacks[w].on_complete = &callback_operation::complete;
            callbacks[w].cq = &state->cq;
            callbacks[w].remaining = per_worker;
            callbacks[w].finished = &state->finished;
            state->cq.post(&callbacks[w], 0);
            break;
        case variant::direct: cordma::spawn_detached(direct_worker(*state, per_worker)); break;
        case variant::slot: cordma::spawn_detached(slot_worker(*state, per_worker, false)); break;
        case variant::slot_mr: cordma::spawn_detached(slot_worker(*state, per_worker, true)); break;
        case variant::task_per_op: cordma::spawn_detached(task_per_op_worker(*state, per_worker)); break;
        }
    }

    cordma::testing::allocation_counter counter;
    auto start = std::chrono::steady_clock::now();
    drain(state->cq, state->finished, depth);
    auto end = std::chrono::steady_clock::now();
    allocs += counter.this_thread().allocations;

    for (auto& c : callbacks)
        state->checksum += c.checksum;
    keep(state->checksum);
    return std::chrono::duration<double>(end - start).count();
}

measurement measure(variant kind, unsigned depth, std::uint64_t ops, unsigned runs) {
    std::vector<double> ns;
    std::uint64_t allocs = 0;
    std::uint64_t done_ops = (ops / depth) * depth;
    run_once(kind, depth, std::min<std::uint64_t>(ops, 100'000), allocs);  // warm caches and the allocator
    allocs = 0;
    for (unsigned r = 0; r < runs; ++r)
        ns.push_back(run_once(kind, depth, ops, allocs) * 1e9 / static_cast<double>(done_ops));
    std::sort(ns.begin(), ns.end());
    return {kind, depth, ns.front(), ns[ns.size() / 2],
            static_cast<double>(allocs) / static_cast<double>(done_ops * runs)};
}

std::uint64_t parse_count(const char* option, std::string_view text) {
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v == 0) {
        std::fprintf(stderr, "coroutine_overhead: %s: '%.*s' is not a positive whole number\n", option,
                     static_cast<int>(text.size()), text.data());
        std::exit(2);
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::uint64_t ops = 2'000'000;
    unsigned runs = 7;
    bool json = false;
    std::string_view only;
    unsigned only_depth = 0;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if ((a == "--iterations" || a == "-n") && i + 1 < argc) {
            ops = parse_count("--iterations", argv[++i]);
        } else if (a == "--runs" && i + 1 < argc) {
            runs = static_cast<unsigned>(std::min<std::uint64_t>(parse_count("--runs", argv[++i]), 1000));
        } else if (a == "--only" && i + 1 < argc) {
            only = argv[++i];
        } else if (a == "--depth" && i + 1 < argc) {
            only_depth = static_cast<unsigned>(std::min<std::uint64_t>(parse_count("--depth", argv[++i]), 256));
        } else if (a == "--json") {
            json = true;
        } else if (a == "-h" || a == "--help") {
            std::puts("usage: coroutine_overhead [--iterations N] [--runs N] [--only VARIANT] [--depth N] [--json]\n"
                      "ns and heap allocations per awaited operation through cordma::task, an awaiter and\n"
                      "completion_target dispatch from a fake CQ, against a plain callback.\n"
                      "VARIANT: callback, task+awaiter, task+slot, task+slot+mr, task-per-op.");
            return 0;
        } else {
            std::fprintf(stderr, "coroutine_overhead: unknown or incomplete option '%s' (--help)\n", argv[i]);
            return 2;
        }
    }
    if (ops < 64 && only_depth == 0) {
        std::fprintf(stderr, "coroutine_overhead: --iterations must be at least 64 (the largest depth)\n");
        return 2;
    }

    const variant all[] = {variant::callback, variant::direct, variant::slot, variant::slot_mr, variant::task_per_op};
    std::vector<variant> variants(std::begin(all), std::end(all));
    std::vector<unsigned> depths = {1u, 64u};
    if (!only.empty()) {
        auto it = std::find_if(variants.begin(), variants.end(), [&](variant v) {
            std::string name = name_of(v);
            std::replace(name.begin(), name.end(), ' ', '-');
            return name == only;
        });
        if (it == variants.end()) {
            std::fprintf(stderr, "coroutine_overhead: --only: '%.*s' is not a variant (--help lists them)\n",
                         static_cast<int>(only.size()), only.data());
            return 2;
        }
        variants = {*it};
    }
    if (only_depth != 0) {
        if (ops < only_depth) {
            std::fprintf(stderr, "coroutine_overhead: --iterations must be at least --depth\n");
            return 2;
        }
        depths = {only_depth};
    }
    if (!only.empty() && runs == 7)
        runs = 1;

    std::vector<measurement> results;
    for (unsigned depth : depths)
        for (variant v : variants)
            results.push_back(measure(v, depth, ops, runs));

    auto baseline = [&](unsigned depth) {
        for (const auto& m : results)
            if (m.kind == variant::callback && m.depth == depth)
                return m.best_ns;
        return 0.0;
    };

    if (json) {
        std::printf("{\n  \"tool\": \"coroutine_overhead\",\n  \"iterations\": %llu,\n  \"runs\": %u,\n  \"results\": [",
                    static_cast<unsigned long long>(ops), runs);
        for (std::size_t i = 0; i < results.size(); ++i) {
            const auto& m = results[i];
            std::printf("%s\n    {\"variant\": \"%s\", \"depth\": %u, \"ns_per_op\": %.3f, \"median_ns_per_op\": %.3f, "
                        "\"allocations_per_op\": %.4f, \"vs_callback\": %.3f}",
                        i ? "," : "", name_of(m.kind), m.depth, m.best_ns, m.median_ns, m.allocations_per_op,
                        baseline(m.depth) > 0 ? m.best_ns / baseline(m.depth) : 0.0);
        }
        std::printf("\n  ]\n}\n");
        return 0;
    }

    std::printf("coroutine_overhead: %llu operations per run, best of %u runs (median beside it)\n",
                static_cast<unsigned long long>(ops), runs);
    std::printf("one operation = post to a fake CQ, drain it like event_listener::drain, dispatch through "
                "completion_target\n\n");
    std::printf("%-14s %6s %10s %12s %12s %12s\n", "variant", "depth", "ns/op", "median ns/op", "allocs/op",
                "vs callback");
    for (const auto& m : results)
        if (baseline(m.depth) > 0)
            std::printf("%-14s %6u %10.2f %12.2f %12.4f %11.2fx\n", name_of(m.kind), m.depth, m.best_ns, m.median_ns,
                        m.allocations_per_op, m.best_ns / baseline(m.depth));
        else
            std::printf("%-14s %6u %10.2f %12.2f %12.4f %12s\n", name_of(m.kind), m.depth, m.best_ns, m.median_ns,
                        m.allocations_per_op, "n/a");
    for (unsigned depth : depths)
        for (const auto& m : results)
            if (m.kind == variant::slot && m.depth == depth && baseline(depth) > 0)
                std::printf("\ncordma-shaped operation (task+slot), depth %u: %.2f ns/op, %.2f ns over the callback, "
                            "%.4f allocations/op (target: < 50 ns/op, 0 allocations)",
                            depth, m.best_ns, baseline(depth) > 0 ? m.best_ns - baseline(depth) : 0.0,
                            m.allocations_per_op);
    std::printf("\n");
    return 0;
}
