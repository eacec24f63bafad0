// One event listener running the completions of two device contexts
// (event_listener::create_cq(device, entries)): the ground a connection
// over several rails stands on, one thread for every port it uses. The
// second context is the VM's second rail (rxe1, tools/rxe-vm --rails 2)
// when there is one, else a second context on the test device: a
// context, completion channel and PD of its own either way, so the
// listener watches two completion channels and joins nothing between
// threads.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <cordma/connection.hpp>
#include <cordma/device_counters.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/loopback_pair.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;

namespace {

/// The second context: the second rail's device inside tools/rxe-vm
/// --rails 2, else a context of its own on the test device (opened here:
/// device_context::open shares librdmacm's one context per device), closed
/// when this goes, after everything made on it.
struct second_context {
    ibv_context* own = nullptr;
    std::shared_ptr<device_context> device;

    second_context() {
        const char* rails = std::getenv("RXE_VM_RAIL_DEVICES");
        std::istringstream names(rails != nullptr ? rails : "");
        std::string first, second;
        if (names >> first >> second) {
            device = device_context::open(second);
            return;
        }
        std::string name = test::open_test_device()->name();
        int count = 0;
        ibv_device** list = ibv_get_device_list(&count);
        REQUIRE(list != nullptr);
        for (int i = 0; i < count && own == nullptr; ++i)
            if (name == ibv_get_device_name(list[i]))
                own = ibv_open_device(list[i]);
        ibv_free_device_list(list);
        REQUIRE(own != nullptr);
        device = device_context::from_native(own);
    }
    second_context(const second_context&) = delete;
    second_context& operator=(const second_context&) = delete;
    ~second_context() {
        device.reset();
        if (own != nullptr)
            ibv_close_device(own);
    }
};

void fill(local_mr& mr, unsigned seed) {
    for (std::size_t i = 0; i < mr.size(); ++i)
        mr.data()[i] = static_cast<std::byte>((i * 29 + seed) & 0xff);
}

bool same_bytes(const local_mr& a, const local_mr& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

struct side {
    std::shared_ptr<memory_pool> pool;
    connection client, server;
    local_mr source, target, back, message, inbox;

    side(const std::shared_ptr<event_listener>& el, std::shared_ptr<device_context> device, unsigned seed)
        : pool(memory_pool::create(protection_domain::create(std::move(device)))) {
        std::tie(client, server) = test::adopted_pair(el, pool->pd());
        source = pool->allocate(64 << 10);
        target = pool->allocate_zeroed(64 << 10);
        back = pool->allocate_zeroed(64 << 10);
        message = pool->allocate(1000);
        inbox = pool->allocate_zeroed(1000);
        fill(source, seed);
        fill(message, seed + 1);
    }
};

/// 50 rounds of a write, a read back and a message on `s`, each checked
/// to resume on the listener's thread; false at the first that does not.
task<bool> traffic(side& s, const std::shared_ptr<event_listener>& el) {
    bool on_thread = true;
    for (int round = 0; round < 50; ++round) {
        co_await s.client.write(s.source.all(), s.target.remote());
        on_thread = on_thread && el->running_in_this_thread();
        co_await s.client.read(s.back.all(), s.target.remote());
        on_thread = on_thread && el->running_in_this_thread();
        auto [received, sent] = co_await when_all(s.server.recv(s.inbox.all()), s.client.send(s.message.all()));
        on_thread = on_thread && el->running_in_this_thread() && received.length == s.message.size();
    }
    co_return on_thread;
}

}  // namespace

TEST_CASE("one event listener runs the completions of a second device context", "[several_devices]") {
    polling_mode mode = GENERATE(polling_mode::event, polling_mode::adaptive);
    INFO("polling mode " << to_string(mode));
    second_context context;  // first: closed after everything below
    auto first = test::open_test_device();
    auto second = context.device;
    INFO("second context: " << second->name());
    REQUIRE(second->native_handle() != first->native_handle());
    auto el = event_listener::start(first, {.mode = mode});

    {
        side a(el, first, 3);
        side b(el, second, 7);
        auto devices = el->devices();
        REQUIRE(devices.size() == 2);
        CHECK(devices[0] == first);
        CHECK(devices[1] == second);
        // A second CQ on the same context shares its channel: still two.
        CHECK(el->create_cq(second, 16)->device() == second);
        CHECK(el->devices().size() == 2);

        // Both sides' traffic at once: each side's completions come through
        // its own context's channel, and every coroutine resumes on el's thread.
        auto [on_thread_a, on_thread_b] = sync_wait([&]() -> task<std::pair<bool, bool>> {
            co_await el->schedule();
            auto [x, y] = co_await when_all(traffic(a, el), traffic(b, el));
            co_return std::pair{x, y};
        }());
        CHECK(on_thread_a);
        CHECK(on_thread_b);
        for (side* s : {&a, &b}) {
            CHECK(same_bytes(s->source, s->target));
            CHECK(same_bytes(s->source, s->back));
            CHECK(same_bytes(s->message, s->inbox));
        }
        // Counted where each side's completions were handled: 50 of each kind.
        for (side* s : {&a, &b}) {
            auto c = s->client.counters();
            CHECK(c[operation_kind::write].completed == 50);
            CHECK(c[operation_kind::read].completed == 50);
            CHECK(c[operation_kind::send].completed == 50);
            CHECK(s->server.counters()[operation_kind::recv].completed == 50);
        }
        // Every device the listener runs is in its metrics, each once.
        std::vector<std::string> names;
        for (const auto& d : el->metrics().devices)
            if (d.port == 1)
                names.push_back(d.device);
        CHECK(std::count(names.begin(), names.end(), first->name()) == 1);
        CHECK(std::count(names.begin(), names.end(), second->name()) == 1);
    }
    // The connections and CQs let go of the listener on its thread, as
    // they are retired there: once the test holds the last reference, the
    // listener goes here (its thread joined, the second context's channel
    // destroyed) before that context is closed.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (el.use_count() > 1 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();  // polling the reference count, bounded
    REQUIRE(el.use_count() == 1);
    el.reset();
}
