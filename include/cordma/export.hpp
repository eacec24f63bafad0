#pragma once
/// CORDMA_API marks what libcordma.so exports. The library is built with
/// hidden visibility (-fvisibility=hidden -fvisibility-inlines-hidden), so
/// everything else, Asio and cordma's internals included, stays inside it:
/// applications link against the public API only, and the internals can
/// change without breaking them.

#if defined(CORDMA_STATIC)
#define CORDMA_API
#else
#define CORDMA_API __attribute__((visibility("default")))
#endif
