#pragma once
/// \file
/// CORDMA_API marks what libcordma.so exports. The library is built with
/// hidden visibility (-fvisibility=hidden -fvisibility-inlines-hidden), so
/// everything else, Asio and cordma's internals included, stays inside it:
/// applications link against the public API only, and the internals can
/// change without breaking them.

#if defined(CORDMA_STATIC)
#define CORDMA_API
#else
/// Exports the class or function it marks from libcordma.so (default
/// visibility). Empty when CORDMA_STATIC is defined, for a static build of
/// the library. Only cordma's own headers use it.
#define CORDMA_API __attribute__((visibility("default")))
#endif

// cordma's C++ headers need C++20 (coroutines, concepts, std::span); its C
// API (cordma.h) needs only C11. Said here, once, instead of a wall of
// errors from the first coroutine.
#if defined(__cplusplus) && __cplusplus < 202002L
#error "cordma's C++ headers need C++20: compile with -std=c++20 (g++ 12 defaults to C++17); C programs include <cordma/cordma.h>"
#endif
