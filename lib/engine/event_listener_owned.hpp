#pragma once
/// Ownership of objects that receive callbacks on the event listener thread
/// (rdma_cm ids, listening ids, TCP channels and acceptors): they must be
/// destroyed on that thread too, between dispatches, or a callback could
/// reach a freed object.

#include <memory>

#include <cordma/event_listener.hpp>

namespace cordma::detail {

/// Takes `object` (just made with new) into a shared_ptr whose last owner
/// deletes it on `listener`'s thread: at once if that is where it is dropped,
/// otherwise through listener->post. The deleter holds `listener`, so the
/// thread outlives the object.
template <class T>
std::shared_ptr<T> owned_by_event_listener_thread(std::shared_ptr<event_listener> el, T* object) {
    return std::shared_ptr<T>(object, [el = std::move(el)](T* p) {
        if (el->running_in_this_thread())
            delete p;
        else
            el->post([p] { delete p; });
    });
}

}  // namespace cordma::detail
