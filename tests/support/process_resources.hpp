#pragma once
// What a process holds: its RDMA resources as the kernel counts them
// (`rdma -j resource show qp|cq|mr|pd|cm_id`, the entries whose pid is
// the process's), its open file descriptors and its resident memory. For
// the tests that must prove everything is given back (tests/faults/,
// resources_test): a count taken before and one after must be equal.

#include <dirent.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace cordma::test {

struct process_resources {
    int qp = 0, cq = 0, mr = 0, pd = 0, cm_id = 0;
    int fds = 0;

    bool operator==(const process_resources&) const = default;

    std::string to_string() const {
        return "qp " + std::to_string(qp) + ", cq " + std::to_string(cq) + ", mr " + std::to_string(mr) + ", pd " +
               std::to_string(pd) + ", cm_id " + std::to_string(cm_id) + ", fds " + std::to_string(fds);
    }
};

/// Entries of `rdma -j resource show KIND` that belong to `pid`. Throws if
/// the rdma tool cannot run (iproute2 is required: a silent 0 would make
/// every comparison pass).
inline int rdma_resource_count(const char* kind, long pid) {
    std::string command = std::string("rdma -j resource show ") + kind + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr)
        throw std::runtime_error("popen(" + command + ") failed");
    std::string out;
    std::array<char, 4096> chunk;
    for (std::size_t n; (n = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0;)
        out.append(chunk.data(), n);
    int status = ::pclose(pipe);
    if (status != 0 || out.empty() || out.front() != '[')
        throw std::runtime_error("`" + command + "` failed (status " + std::to_string(status) + "): " + out);
    // Each entry is one JSON object with one "pid" member; kernel-owned
    // entries have none.
    int count = 0;
    std::string key = "\"pid\":" + std::to_string(pid);
    for (std::size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + key.size())) {
        char after = at + key.size() < out.size() ? out[at + key.size()] : '\0';
        if (after == ',' || after == '}')
            ++count;
    }
    return count;
}

inline int open_fd_count() {
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr)
        throw std::runtime_error("opendir(/proc/self/fd) failed");
    int count = 0;
    while (dirent* e = ::readdir(dir))
        if (e->d_name[0] != '.')
            ++count;
    ::closedir(dir);
    return count - 1;  // the directory stream's own descriptor
}

inline process_resources current_resources(long pid = ::getpid()) {
    process_resources r;
    r.qp = rdma_resource_count("qp", pid);
    r.cq = rdma_resource_count("cq", pid);
    r.mr = rdma_resource_count("mr", pid);
    r.pd = rdma_resource_count("pd", pid);
    r.cm_id = rdma_resource_count("cm_id", pid);
    r.fds = open_fd_count();
    return r;
}

/// Resident memory in KiB (/proc/self/statm).
inline long resident_kib() {
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr)
        throw std::runtime_error("fopen(/proc/self/statm) failed");
    long size = 0, resident = 0;
    int got = std::fscanf(f, "%ld %ld", &size, &resident);
    std::fclose(f);
    if (got != 2)
        throw std::runtime_error("could not read /proc/self/statm");
    return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace cordma::test
