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
