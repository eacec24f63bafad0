// Placeholder until the task machinery lands.
#include <catch2/catch.hpp>
