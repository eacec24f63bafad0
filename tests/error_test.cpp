#include <cerrno>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>
#include <cordma/device.hpp>

#include "verbs/check.hpp"

using namespace cordma;

TEST_CASE("each C error convention becomes a verbs_error naming the call", "[error]") {
    auto describe = [] { return std::string("ibv_reg_mr(length=4096, access=local_write|remote_write)"); };

    SECTION("an errno return value") {
        try {
            detail::check_errno_return(ENOMEM, describe);
            FAIL("no throw");
        } catch (const verbs_error& e) {
            CHECK(std::string(e.what()) ==
                  "ibv_reg_mr(length=4096, access=local_write|remote_write): Cannot allocate memory");
            CHECK(e.code() == std::errc::not_enough_memory);
        }
    }
    SECTION("-1 with errno set") {
        errno = EAGAIN;
        CHECK_THROWS_MATCHES(detail::check_minus_one(-1, describe), std::system_error,
                             Catch::Predicate<std::system_error>(
                                 [](const std::system_error& e) { return e.code() == std::errc::resource_unavailable_try_again; }));
    }
    SECTION("a negative errno return value") {
        CHECK_THROWS_WITH(detail::check_errno_return(-EINVAL, describe), Catch::EndsWith("Invalid argument"));
    }
    SECTION("NULL with errno, and NULL where the provider forgot errno") {
        errno = EACCES;
        CHECK_THROWS_WITH(detail::check_pointer(static_cast<int*>(nullptr), describe), Catch::EndsWith("Permission denied"));
        errno = 0;
        CHECK_THROWS_WITH(detail::check_pointer(static_cast<int*>(nullptr), describe), Catch::EndsWith("Cannot allocate memory"));
    }
    SECTION("success passes values through without building a message") {
        int built = 0;
        auto counting = [&] { ++built; return std::string("x"); };
        int value = 5;
        CHECK(detail::check_pointer(&value, counting) == &value);
        CHECK(detail::check_minus_one(3, counting) == 3);
        detail::check_errno_return(0, counting);
        CHECK(built == 0);
    }
}

TEST_CASE("work completion errors say what their status means, and a flushed one why", "[error]") {
    cordma::work_completion_error retry(IBV_WC_RETRY_EXC_ERR, "write", 0, "10.78.0.1:7620");
    std::string what = retry.what();
    CHECK(what.find("write to 10.78.0.1:7620: transport retry counter exceeded") == 0);
    CHECK(what.find("the peer stopped acknowledging") != std::string::npos);
    CHECK(what.find("builder::retry_count") != std::string::npos);
    CHECK(retry.code() == make_error_code(IBV_WC_RETRY_EXC_ERR));

    cordma::work_completion_error flushed(IBV_WC_WR_FLUSH_ERR, "read", 0, "10.78.0.1:7620",
                                          "an earlier write failed with transport retry counter exceeded");
    what = flushed.what();
    CHECK(what.find("read to 10.78.0.1:7620: Work Request Flushed Error") == 0);
    CHECK(what.find(": flushed: an earlier write failed") != std::string::npos);
    CHECK(flushed.status() == IBV_WC_WR_FLUSH_ERR);

    // A status with no single cause gets no explanation made up for it.
    cordma::work_completion_error general(IBV_WC_GENERAL_ERR, "send", 7, "peer");
    CHECK(std::string(general.what()) == "send to peer: general error (status " + std::to_string(int(IBV_WC_GENERAL_ERR)) + ", vendor_err 0x7)");
}

TEST_CASE("a work completion's status compares with its enum, and with std::errc where it has a generic meaning",
          "[error]") {
    cordma::work_completion_error access(IBV_WC_REM_ACCESS_ERR, "write", 0, "10.78.0.1:7620");
    // Found by argument-dependent lookup, with no using-declaration.
    CHECK(access.code() == IBV_WC_REM_ACCESS_ERR);
    CHECK(access.code() != IBV_WC_REM_INV_REQ_ERR);
    CHECK(access.code() == std::errc::permission_denied);
    CHECK(access.code() != std::errc::timed_out);

    cordma::work_completion_error retry(IBV_WC_RETRY_EXC_ERR, "read", 0, "peer");
    CHECK(retry.code() == IBV_WC_RETRY_EXC_ERR);
    CHECK(retry.code() == std::errc::timed_out);

    cordma::work_completion_error flushed(IBV_WC_WR_FLUSH_ERR, "recv", 0, "peer");
    CHECK(flushed.code() == std::errc::connection_aborted);

    // No generic meaning made up for the rest.
    cordma::work_completion_error general(IBV_WC_GENERAL_ERR, "send", 0, "peer");
    CHECK(general.code() != std::errc::io_error);
    CHECK(general.code() == IBV_WC_GENERAL_ERR);
    CHECK(std::string(general.code().category().name()) == "cordma.work_completion");
}

TEST_CASE("cordma's own error codes compare with themselves and with their std::errc", "[error]") {
    using cordma::errc;
    struct expectation {
        errc code;
        std::errc generic;
    };
    for (auto [code, generic] : {expectation{errc::no_device, std::errc::no_such_device},
                                 expectation{errc::memlock_limit, std::errc::not_enough_memory},
                                 expectation{errc::protocol_violation, std::errc::protocol_error},
                                 expectation{errc::atomic_result_lost, std::errc::io_error}}) {
        std::error_code ec = code;  // is_error_code_enum: converts implicitly
        INFO(ec.message());
        CHECK(ec == code);
        CHECK(ec == generic);
        CHECK(std::string(ec.category().name()) == "cordma");
        CHECK_FALSE(ec.message().empty());
        CHECK(ec != std::errc::host_unreachable);
    }
    std::error_code dns = errc::host_not_found;
    CHECK(dns == errc::host_not_found);
    CHECK(dns != std::errc::host_unreachable);  // a name that does not resolve is not an unreachable host
    CHECK(dns.message() == "host not found");
    CHECK(std::error_code(errc::no_device) != errc::memlock_limit);

    cordma::verbs_error memlock(make_error_code(errc::memlock_limit), "ibv_reg_mr(length=4096): the whole message");
    CHECK(std::string(memlock.what()) == "ibv_reg_mr(length=4096): the whole message");
    CHECK(memlock.code() == std::errc::not_enough_memory);
}

TEST_CASE("a host name that does not resolve says so, not 'No route to host'", "[error]") {
    try {
        (void)cordma::resolve(cordma::parse_address("no-such-host.invalid:7471"));
        FAIL("no-such-host.invalid resolved");
    } catch (const std::system_error& e) {
        INFO(e.what());
        CHECK(e.code() == cordma::errc::host_not_found);
        CHECK_THAT(e.what(), Catch::Contains("cannot resolve host 'no-such-host.invalid'") &&
                                 Catch::Contains("getaddrinfo: ") && !Catch::Contains("No route to host"));
    }
}

TEST_CASE("with no RDMA device, device_names() is empty and connecting says how to make one", "[error]") {
    // The unit suite runs natively; CI's hosts (and most laptops) have no
    // RDMA device, and some kernels no RDMA support at all. On a host that
    // has devices, the named-device error is checked instead.
    std::vector<std::string> names;
    REQUIRE_NOTHROW(names = cordma::device_names());
    cordma::builder b;
    if (names.empty()) {
        b.connect_timeout(std::chrono::milliseconds(100));
    } else {
        b.device("no-such-device0");
    }
    try {
        (void)b.connect("127.0.0.1:7471");
        FAIL("connect found a device");
    } catch (const cordma::verbs_error& e) {
        INFO(e.what());
        CHECK(e.code() == cordma::errc::no_device);
        CHECK(e.code() == std::errc::no_such_device);
        CHECK_THAT(e.what(), Catch::Contains("modprobe rdma_rxe") && Catch::Contains("rdma link add") &&
                                 Catch::Contains("tools/doctor") && Catch::Contains("tools/rxe-vm"));
        if (names.empty())
            CHECK_THAT(e.what(), Catch::Contains("this host has no RDMA device"));
        else
            CHECK_THAT(e.what(), Catch::Contains("no-such-device0") && Catch::Contains(names.front()));
    }
}

TEST_CASE("the pool's chunk size is refused below a page, by name", "[error]") {
    cordma::builder b;
    CHECK_THROWS_WITH(b.pool_chunk_size(100), Catch::Contains("builder::pool_chunk_size(100)") &&
                                                  Catch::Contains("at least 4096"));
    CHECK_NOTHROW(b.pool_chunk_size(64 << 10));
    CHECK(b.settings().pool_chunk_size == (64u << 10));
    CHECK_NOTHROW(b.pool_initial_size(1 << 20));
    CHECK(b.settings().pool_initial_size == (1u << 20));
}
