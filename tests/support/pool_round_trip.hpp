#pragma once
// A server and a client of one builder, in one process, moving bytes
// through the builder's pool: what environment_test (under a small memlock
// limit) and memory_pool_test (with small chunks) check a pool with.

#include <cstring>
#include <string>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/rxe_device.hpp"

namespace cordma::test {

/// A server and a client of `b` in one process write 4 KiB to each other's
/// granted memory and read it back; returns what the client read.
inline task<std::string> round_trip(builder& b) {
    listener l = b.listen(any_port());
    auto [server, client] = co_await when_all(l.accept(), b.connect(l.address()));
    remote_mr theirs = co_await client.request_remote_mr(4096);
    local_mr mine = b.pool()->allocate(4096);
    std::string text = "bytes that crossed rxe under a small memlock limit";
    std::memcpy(mine.data(), text.data(), text.size());
    co_await client.write(mine.slice(0, text.size()), theirs.slice(0, text.size()));
    std::memset(mine.data(), 0, 4096);
    co_await client.read(mine.slice(0, text.size()), theirs.slice(0, text.size()));
    std::string got(reinterpret_cast<const char*>(mine.data()), text.size());
    co_await client.close();
    co_return got;
}

}  // namespace cordma::test
