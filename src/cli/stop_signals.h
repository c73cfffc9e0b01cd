// SIGINT and SIGTERM for tern serve: blocked in every thread and taken by one
// watcher, so that a stop is bounded whatever the process is doing. Before
// the model has loaded there is nothing to finish: the process exits at once.
// After, wait() returns and the server stops; if that has not ended within
// kStopBound, the process exits anyway (status 1), so a stalled client or a
// long engine step can never hold a stop; extend() grants known work (the
// disk cache's queued writes) more.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace tern::cli {

inline constexpr std::chrono::seconds kStopBound{2};

class StopSignals {
 public:
  StopSignals();                           // blocks the signals (for threads made from here on too)
  void loaded();                           // from here on a signal stops the server through wait()
  int wait();                              // the signal's number
  void extend(std::chrono::seconds more);  // after wait(): moves the exit's deadline

 private:
  struct State {  // shared with the watcher, which may outlive this object
    std::mutex m;
    std::condition_variable cv;
    bool loaded = false;
    int signal = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  static void watch(std::shared_ptr<State> state);
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace tern::cli
