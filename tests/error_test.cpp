#include <cerrno>

#include <catch2/catch.hpp>

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
