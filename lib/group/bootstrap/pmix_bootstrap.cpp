// The PMIx bootstrap over the PMIx client library (PMIx_Init, Put, Commit,
// Fence, Get, Finalize). Built without PMIx (meson -Dpmix=disabled, or no
// libpmix), the factory only says so.
#include "group/bootstrap/pmix_bootstrap.hpp"

#include "group/bootstrap/pmix_config.hpp"

#if CORDMA_HAVE_PMIX

#include <pmix.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <cordma/group.hpp>

namespace cordma::detail {

namespace {

using clock = std::chrono::steady_clock;

std::string pmix_failure(const std::string& call, pmix_status_t rc) {
    return call + ": " + PMIx_Error_string(rc);
}

// Whole seconds left before `deadline`, at least 1: PMIX_TIMEOUT counts in
// seconds, and 0 would mean "no timeout".
int seconds_left(clock::time_point deadline) {
    auto left = std::chrono::ceil<std::chrono::seconds>(deadline - clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 1, 1'000'000));
}

// A fence in flight. PMIx_Fence_nb reports on a PMIx thread; it owns this
// (and the info array, which PMIx reads until then), so a caller that gave
// up at its deadline leaves nothing dangling.
struct fence_call {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    pmix_status_t status = PMIX_SUCCESS;
    pmix_info_t* info = nullptr;
    std::size_t ninfo = 0;

    ~fence_call() {
        if (info != nullptr)
            PMIX_INFO_FREE(info, ninfo);
    }
};

void fence_done(pmix_status_t status, void* data) {
    auto* call = static_cast<std::shared_ptr<fence_call>*>(data);
    {
        std::lock_guard lock((*call)->mutex);
        (*call)->done = true;
        (*call)->status = status;
    }
    (*call)->done_cv.notify_all();
    delete call;
}

class pmix_bootstrap final : public group_bootstrap {
public:
    pmix_bootstrap(const pmix_proc_t& me, int size) : me_(me), size_(size) {}
    ~pmix_bootstrap() override { PMIx_Finalize(nullptr, 0); }

    int rank() const override { return static_cast<int>(me_.rank); }
    int size() const override { return size_; }
    std::string describe() const override {
        return "PMIx (namespace " + std::string(me_.nspace) + ", rank " + std::to_string(me_.rank) + " of " +
               std::to_string(size_) + ")";
    }

    std::vector<std::string> exchange(const std::string& endpoint, clock::time_point deadline) override {
        auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
        pmix_value_t value;
        PMIX_VALUE_LOAD(&value, endpoint.c_str(), PMIX_STRING);
        pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, pmix_endpoint_key, &value);
        PMIX_VALUE_DESTRUCT(&value);
        if (rc != PMIX_SUCCESS)
            throw std::runtime_error(pmix_failure(std::string("PMIx_Put(PMIX_GLOBAL, ") + pmix_endpoint_key + ")", rc));
        if (rc = PMIx_Commit(); rc != PMIX_SUCCESS)
            throw std::runtime_error(pmix_failure("PMIx_Commit", rc));
        fence(deadline, limit);

        std::vector<std::string> out(size_);
        for (int r = 0; r < size_; ++r) {
            pmix_proc_t proc;
            PMIX_PROC_LOAD(&proc, me_.nspace, static_cast<pmix_rank_t>(r));
            pmix_info_t* info = nullptr;
            PMIX_INFO_CREATE(info, 1);
            int seconds = seconds_left(deadline);
            PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &seconds, PMIX_INT);
            pmix_value_t* got = nullptr;
            rc = PMIx_Get(&proc, pmix_endpoint_key, info, 1, &got);
            PMIX_INFO_FREE(info, 1);
            if (rc == PMIX_ERR_TIMEOUT)
                throw group_error(std::errc::timed_out,
                                  "PMIx_Get(rank " + std::to_string(r) + ", " + pmix_endpoint_key + "): " +
                                      describe() + ": rank " + std::to_string(r) + "'s endpoint never came within " +
                                      std::to_string(limit.count()) + " ms",
                                  {r});
            if (rc != PMIX_SUCCESS)
                throw std::runtime_error(pmix_failure("PMIx_Get(rank " + std::to_string(r) + ", " +
                                                          pmix_endpoint_key + ") after the fence",
                                                      rc) +
                                         ": did that rank call exchange with the same cordma?");
            bool is_string = got->type == PMIX_STRING && got->data.string != nullptr;
            std::string text = is_string ? got->data.string : std::string();
            PMIX_VALUE_RELEASE(got);
            if (!is_string)
                throw std::runtime_error("PMIx_Get(rank " + std::to_string(r) + ", " + pmix_endpoint_key +
                                         "): the value is not a string");
            out[r] = std::move(text);
        }
        return out;
    }

private:
    // Every process of the namespace, with data collection. PMIX_TIMEOUT
    // asks the server to give up in time; the wait here holds to the
    // deadline even if a server ignores it.
    void fence(clock::time_point deadline, std::chrono::milliseconds limit) {
        auto call = std::make_shared<fence_call>();
        call->ninfo = 2;
        PMIX_INFO_CREATE(call->info, call->ninfo);
        bool collect = true;
        int seconds = seconds_left(deadline);
        PMIX_INFO_LOAD(&call->info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        PMIX_INFO_LOAD(&call->info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
        pmix_proc_t all;
        PMIX_PROC_LOAD(&all, me_.nspace, PMIX_RANK_WILDCARD);
        auto* handle = new std::shared_ptr<fence_call>(call);
        pmix_status_t rc = PMIx_Fence_nb(&all, 1, call->info, call->ninfo, fence_done, handle);
        if (rc != PMIX_SUCCESS) {
            delete handle;
            throw std::runtime_error(pmix_failure("PMIx_Fence_nb(namespace " + std::string(me_.nspace) + ")", rc));
        }
        std::unique_lock lock(call->mutex);
        bool done = call->done_cv.wait_until(lock, deadline, [&] { return call->done; });
        std::string timeout = "PMIx_Fence(namespace " + std::string(me_.nspace) + ", collect data): " + describe() +
                              ": not every rank reached the fence within " + std::to_string(limit.count()) +
                              " ms (PMIx does not say which)";
        if (!done || call->status == PMIX_ERR_TIMEOUT)
            throw group_error(std::errc::timed_out, timeout);
        if (call->status != PMIX_SUCCESS)
            throw std::runtime_error(pmix_failure("PMIx_Fence(namespace " + std::string(me_.nspace) + ")",
                                                  call->status));
    }

    pmix_proc_t me_;
    int size_;
};

// The job's size: PMIX_JOB_SIZE, else PMIX_UNIV_SIZE; 0 when neither.
int job_size(const pmix_proc_t& me, std::string& why_not) {
    pmix_proc_t job;
    PMIX_PROC_LOAD(&job, me.nspace, PMIX_RANK_WILDCARD);
    for (const char* key : {PMIX_JOB_SIZE, PMIX_UNIV_SIZE}) {
        pmix_value_t* value = nullptr;
        pmix_status_t rc = PMIx_Get(&job, key, nullptr, 0, &value);
        if (rc != PMIX_SUCCESS) {
            why_not += (why_not.empty() ? "" : "; ") + pmix_failure(std::string("PMIx_Get(") + key + ")", rc);
            continue;
        }
        int size = value->type == PMIX_UINT32 ? static_cast<int>(value->data.uint32) : 0;
        PMIX_VALUE_RELEASE(value);
        if (size > 0)
            return size;
        why_not += (why_not.empty() ? "" : "; ") + std::string(key) + " is not a positive uint32";
    }
    return 0;
}

}  // namespace

std::shared_ptr<group_bootstrap> make_pmix_bootstrap(std::string* why_not) {
    std::string why;
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
    if (rc != PMIX_SUCCESS) {
        if (why_not != nullptr)
            *why_not = pmix_failure("PMIx_Init", rc) + " (no PMIx server: not started by mpirun, srun --mpi=pmix "
                                                       "or prterun)";
        return nullptr;
    }
    int size = job_size(me, why);
    if (size == 0) {
        PMIx_Finalize(nullptr, 0);
        if (why_not != nullptr)
            *why_not = "PMIx_Init worked but the job size is unknown: " + why;
        return nullptr;
    }
    return std::make_shared<pmix_bootstrap>(me, size);
}

}  // namespace cordma::detail

#else

namespace cordma::detail {

std::shared_ptr<group_bootstrap> make_pmix_bootstrap(std::string* why_not) {
    if (why_not != nullptr)
        *why_not = "cordma was built without PMIx (install libpmix-dev and configure with -Dpmix=enabled)";
    return nullptr;
}

}  // namespace cordma::detail

#endif
