// The hello of a new link (link_hello.hpp) and the link it sizes.
#include "link/link_hello.hpp"

#include <span>
#include <string>
#include <system_error>

#include "link/link_wire.hpp"

namespace cordma::detail {

namespace wire = link_wire;

namespace {

const char* module_of(std::uint64_t mark) {
    if (mark == c_api_hello_mark)
        return "a cordma C API context";
    if (mark == stream_hello_mark)
        return "a cordma stream";
    return "not cordma's, or another cordma module's";
}

[[noreturn]] void refuse(const std::string& why) {
    throw std::system_error(std::make_error_code(std::errc::protocol_error), why);
}

}  // namespace

task<link_terms> exchange_hello(cordma::connection conn, receive_queue* queue, std::shared_ptr<memory_pool> pool,
                                std::uint64_t mark, link_terms mine, std::chrono::milliseconds timeout,
                                std::stop_token token, bool accepting) {
    local_mr hello = pool->allocate(wire::header_size);
    wire::header h;
    h.type = wire::frame::hello;
    h.seq = mine.window;
    h.size = mark;
    h.addr = mine.inline_size;
    h.rkey = mine.reads_traces ? wire::hello_reads_traces : 0;
    wire::encode(h, std::span<std::byte, wire::header_size>(hello.data(), wire::header_size));
    local_slice bytes = hello.all();
    if (!accepting)
        co_await conn.send(bytes);

    received_message m = co_await queue->next(timeout, token);
    std::string why;
    std::optional<wire::header> theirs = wire::decode(m.bytes(), why);
    if (!theirs)
        refuse("its hello is " + why);
    if (theirs->type != wire::frame::hello)
        refuse(std::string("its first frame is a ") + wire::name(theirs->type) + ", not a hello");
    if (theirs->size != mark)
        refuse(std::string("the peer is ") + module_of(theirs->size) + ", this side " + module_of(mark));
    link_terms t;
    t.window = theirs->seq;
    t.inline_size = static_cast<std::size_t>(theirs->addr);
    t.reads_traces = (theirs->rkey & wire::hello_reads_traces) != 0;
    if (t.window < 2 || t.window > largest_peer_window)
        refuse("its window of " + std::to_string(t.window) + " frames is out of range");
    if (t.inline_size < smallest_inline || t.inline_size > largest_inline)
        refuse("its inline size of " + std::to_string(t.inline_size) + " bytes is out of range");
    if (accepting)
        co_await conn.send(bytes);
    co_return t;
}

std::shared_ptr<peer_link> open_link(std::weak_ptr<link_owner> owner, int rank, std::string name,
                                     cordma::connection conn, receive_queue queue, std::shared_ptr<memory_pool> pool,
                                     link_terms mine, link_terms theirs) {
    auto link = std::make_shared<peer_link>(std::move(owner), rank, std::move(name), std::move(conn), std::move(queue),
                                            mine.window, theirs.window, theirs.inline_size, mine.inline_size,
                                            std::move(pool));
    link->set_peer_reads_traces(theirs.reads_traces);
    return link;
}

}  // namespace cordma::detail
