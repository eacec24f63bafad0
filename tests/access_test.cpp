#include <catch2/catch.hpp>

#include <cordma/access.hpp>

using namespace cordma;

TEST_CASE("access_flags access combine and print like the verbs flags they stand for", "[access]") {
    CHECK(to_verbs(access_flags::local_write | access_flags::remote_read) == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
    CHECK(to_string(access_flags::none) == "none");
    CHECK(to_string(access_flags::local_write | access_flags::remote_write) == "local_write|remote_write");
    CHECK(to_string(access_flags::all) == "local_write|remote_write|remote_read|remote_atomic");
    CHECK(to_string(static_cast<access_flags>(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND)) ==
          "remote_read|0x" + [] {
              char buf[16];
              snprintf(buf, sizeof buf, "%x", IBV_ACCESS_ON_DEMAND);
              return std::string(buf);
          }());
    CHECK(contains(access_flags::all, access_flags::remote_atomic));
    CHECK_FALSE(contains(access_flags::remote_read, access_flags::remote_write));
}
