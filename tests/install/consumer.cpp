// A program built against an *installed* cordma, the way a user would build
// one: `g++ -std=c++20 consumer.cpp $(pkg-config --cflags --libs cordma)`.
// tests/install_test.sh compiles and runs it to prove that the installed
// headers, shared library and cordma.pc work on their own.  It needs no RDMA
// device: it only counts the devices there are, and zero is fine.
#include <cordma/device.hpp>
#include <cordma/error.hpp>

#include <cstdio>
#include <exception>

int main() {
    try {
        const auto names = cordma::device_names();
        std::printf("installed cordma sees %zu RDMA device(s)", names.size());
        for (const auto& name : names)
            std::printf(" %s", name.c_str());
        std::printf("\n");
    } catch (const cordma::verbs_error& e) {
        // A host whose kernel has no RDMA at all makes libibverbs fail the
        // listing itself. Catching cordma's own exception type here still
        // proves the installed headers and library agree.
        std::printf("installed cordma sees 0 RDMA devices (%s)\n", e.what());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "consumer: unexpected exception: %s\n", e.what());
        return 1;
    }
    return 0;
}
