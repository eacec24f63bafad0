#pragma once
/// fan_out: a collective's steps started at once and awaited together, as
/// co_await when_all(std::vector<task<void>>) does, but with nothing
/// allocated per collective once the group is warm: the steps' drivers go
/// in a list the group keeps (cleared after, its capacity reused), and
/// their frames come from the frame cache. when_all(std::vector) allocates
/// the vector it is given and one of its own every time.
///
///     fan_out steps(core->fan());
///     for (int p : peers)
///         steps.add(core->link(p).send(...));
///     co_await steps;  // every step ran to its end; the first failure, in order added, is rethrown
///
/// Event listener thread only, as everything of a group. The group's list
/// serves one fan_out at a time; a second one made while the first is in
/// use (a step that fans out itself) gets a list of its own.

#include <coroutine>
#include <cstddef>
#include <optional>
#include <vector>

#include <cordma/detail/when_all.hpp>
#include <cordma/task.hpp>

namespace cordma::detail {

/// The group's reusable list of drivers.
struct fan_list {
    std::vector<when_all_child<void>> children;
    bool in_use = false;
};

class fan_out {
public:
    explicit fan_out(fan_list& list) noexcept : list_(list.in_use ? nullptr : &list) {
        if (list_ != nullptr)
            list_->in_use = true;
    }
    fan_out(const fan_out&) = delete;
    fan_out& operator=(const fan_out&) = delete;
    ~fan_out() {
        children().clear();  // the drivers' frames go back to the cache; the capacity stays
        if (list_ != nullptr)
            list_->in_use = false;
    }

    /// A step, started when the fan_out is awaited.
    void add(task<void> step) { children().push_back(make_when_all_child<task<void>>(std::move(step))); }

    bool await_ready() const noexcept { return children().empty(); }
    bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
        counter_.emplace(children().size());
        for (auto& child : children())
            child.start(*counter_);
        return counter_->suspend_awaiter(awaiting);
    }
    void await_resume() {
        for (auto& child : children())
            child.take();  // rethrows the first failure
    }

private:
    std::vector<when_all_child<void>>& children() noexcept { return list_ != nullptr ? list_->children : own_; }
    const std::vector<when_all_child<void>>& children() const noexcept {
        return list_ != nullptr ? list_->children : own_;
    }

    fan_list* list_;
    std::vector<when_all_child<void>> own_;
    std::optional<when_all_counter> counter_;
};

}  // namespace cordma::detail
