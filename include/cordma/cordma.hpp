#pragma once
/// \file
/// Everything cordma offers, in one include (except <cordma/asio.hpp>, which
/// needs Asio and is included on its own by programs that use it).
///
///     #include <cordma/cordma.hpp>

#include <cordma/access.hpp>
#include <cordma/address.hpp>
#include <cordma/agent_call.hpp>
#include <cordma/agent_limits.hpp>
#include <cordma/blocking_stream.hpp>
#include <cordma/builder.hpp>
#include <cordma/completion_queue.hpp>
#include <cordma/connection.hpp>
#include <cordma/device.hpp>
#include <cordma/device_counters.hpp>
#include <cordma/latency_histogram.hpp>
#include <cordma/metrics.hpp>
#include <cordma/metrics_endpoint.hpp>
#include <cordma/stuck_report.hpp>
#include <cordma/error.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/group.hpp>
#include <cordma/pending.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/log.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/shared_receive_queue.hpp>
#include <cordma/rails.hpp>
#include <cordma/remote_slice.hpp>
#include <cordma/remote_mr.hpp>
#include <cordma/rpc.hpp>
#include <cordma/rpc_blocking.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/trace.hpp>
#include <cordma/when_all.hpp>
