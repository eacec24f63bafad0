// A listening C context's clients, taken and given receives as they come,
// until cordma_accept (c_arrivals.hpp).
#include "c_api/c_arrivals.hpp"

#include <exception>
#include <utility>

#include <cordma/task_group.hpp>

#include "log/logf.hpp"

namespace cordma::detail::c_api {

arrivals::arrivals(std::shared_ptr<cordma::event_listener> el)
    : ready_(waiter_queue<arrival>::make(el)), room_(waiter_queue<bool>::make(std::move(el))) {
    for (std::size_t i = 0; i < held; ++i)
        room_->push(true);
}

std::shared_ptr<arrivals> arrivals::start(std::shared_ptr<cordma::event_listener> el, cordma::listener l,
                                          std::shared_ptr<memory_pool> pool, std::size_t count, std::size_t size) {
    std::shared_ptr<arrivals> self(new arrivals(el));
    self->address_ = l.address();
    // Onto the event listener first: the queues are its thread's.
    el->post([self, l, pool, count, size]() mutable {
        spawn_detached(take_clients(self, std::move(l), std::move(pool), count, size), [](std::exception_ptr) {});
    });
    return self;
}

task<void> arrivals::take_clients(std::shared_ptr<arrivals> self, cordma::listener l,
                                  std::shared_ptr<memory_pool> pool, std::size_t count, std::size_t size) {
    for (;;) {
        cordma::connection c;
        try {
            if (!co_await self->room_->pop({}, "cordma_accept", self->address_))
                break;
            c = co_await l.accept();
        } catch (const std::exception&) {
            break;  // the listener closed
        }
        try {
            arrival a{c, receive_queue(c, count, size, pool)};
            if (auto refused = self->ready_->push(std::move(a))) {
                refused->conn.shut_down();
                break;
            }
        } catch (const std::exception& e) {
            detail::logf(log_level::warning, "cordma_accept: refused a connection from %s: could not post its receives: %s",
                         c.peer().c_str(), e.what());
            c.shut_down();
            self->room_->push(true);
        }
    }
    // Nobody takes clients any more: the listener refuses them (already
    // closed on the usual way here, cordma_destroy).
    l.close();
    for (auto& a : self->ready_->close())
        a.conn.shut_down();
    self->room_->close();
}

void arrivals::close() {
    room_->close();  // wakes the loop if it waits for room; it closes ready_
}

task<std::optional<arrival>> arrivals::take(std::stop_token token) {
    std::optional<arrival> a = co_await ready_->pop(token, "cordma_accept", address_);
    if (a)
        room_->push(true);
    co_return a;
}

}  // namespace cordma::detail::c_api
