#pragma once
// What a process holds: the RDMA resources of user processes as the kernel
// counts them (`rdma -j resource show qp|cq|mr|pd|cm_id`, every entry with
// a pid), its open file descriptors and its resident memory. For the tests
// that must prove everything is given back (tests/faults/, resources_test):
// a count taken before and one after must be equal.
//
// Every user entry on the host counts, not only those with this process's
// pid: the kernel records the id of the *thread* that created a resource
// (cordma's event listener thread, for most), and a thread that has exited
// could not be traced back to its process. So the caller must be the only
// RDMA process on its host (each runs alone in its tools/rxe-vm VM).

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

/// Entries of `rdma -j resource show KIND` that belong to a user process.
/// Throws if the rdma tool cannot run (iproute2 is required: a silent 0
/// would make every comparison pass).
inline int rdma_resource_count(const char* kind) {
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
    // entries (ib_core's GSI QP, its PD and CQ) have none.
    int count = 0;
    const std::string key = "\"pid\":";
    for (std::size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + key.size()))
        ++count;
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

inline process_resources current_resources() {
    process_resources r;
    r.qp = rdma_resource_count("qp");
    r.cq = rdma_resource_count("cq");
    r.mr = rdma_resource_count("mr");
    r.pd = rdma_resource_count("pd");
    r.cm_id = rdma_resource_count("cm_id");
    r.fds = open_fd_count();
    return r;
}

/// What each open descriptor is (readlink of /proc/self/fd/N), to say what
/// was left open when a count differs.
inline std::string open_fd_targets() {
    std::string list;
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr)
        return list;
    while (dirent* e = ::readdir(dir)) {
        if (e->d_name[0] == '.')
            continue;
        char target[256] = {};
        std::string path = std::string("/proc/self/fd/") + e->d_name;
        ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
        list += std::string(e->d_name) + "=" + (n > 0 ? std::string(target, std::size_t(n)) : "?") + " ";
    }
    ::closedir(dir);
    return list;
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

/// Anonymous memory backed by transparent huge pages, in KiB
/// (/proc/self/smaps_rollup's AnonHugePages; 0 where the kernel lacks it).
/// With THP set to `always`, khugepaged collapses a 2 MiB range with a
/// single page touched into one huge page, all of it resident: a soak that
/// watches resident memory must tell that apart from its own growth.
inline long anon_huge_kib() {
    FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
    if (f == nullptr)
        return 0;
    char line[256];
    long kib = 0;
    while (std::fgets(line, sizeof line, f) != nullptr)
        if (std::sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            break;
    std::fclose(f);
    return kib;
}

}  // namespace cordma::test
