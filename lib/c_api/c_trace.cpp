// The C API's trace context (cordma.h: cordma_set_trace, cordma_last_trace):
// the id every frame of the context carries from now on, and the one the
// last frame taken from a peer carried.
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>

#include <cordma/cordma.h>
#include <cordma/trace.hpp>

#include "c_api/c_call.hpp"
#include "c_api/c_context.hpp"

using namespace cordma::detail::c_api;

extern "C" {

int cordma_set_trace(cordma_context* ctx, const unsigned char* trace_id) {
    return c_entry<int>("cordma_set_trace", "", -1, [&] {
        auto& c = checked_context(ctx);
        std::array<std::byte, 16> bytes{};
        if (trace_id != nullptr)
            std::memcpy(bytes.data(), trace_id, bytes.size());
        const cordma::trace_id id(bytes);
        // Under the call lock, so no call is sending while it changes; under
        // peers_mutex, so a peer being accepted in the background takes
        // either the old id or the new one, whole.
        auto lock = lock_call(c);
        std::lock_guard peers(c.peers_mutex);
        c.trace = id;
        for (auto& p : c.peers)
            p->trace = id;
        return 0;
    });
}

int cordma_last_trace(cordma_context* ctx, int peer, unsigned char* trace_id) {
    return c_entry<int>("cordma_last_trace", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        if (trace_id == nullptr)
            throw c_failure(EINVAL, "trace_id is NULL: pass 16 bytes to copy the trace id into");
        auto lock = lock_call(c);
        const cordma::trace_id id = peer_at(c, peer).last_trace;
        std::memcpy(trace_id, id.bytes().data(), id.bytes().size());
        return id.empty() ? 0 : 1;
    });
}

}  // extern "C"
