#include "cli/stop_signals.h"

#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <thread>

namespace tern::cli {

namespace {

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

}  // namespace

StopSignals::StopSignals() {
  const sigset_t s = stop_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  std::thread(watch, state_).detach();
}

void StopSignals::loaded() {
  std::lock_guard lock(state_->m);
  state_->loaded = true;
}

int StopSignals::wait() {
  std::unique_lock lock(state_->m);
  state_->cv.wait(lock, [&] { return state_->signal != 0; });
  return state_->signal;
}

void StopSignals::extend(std::chrono::seconds more) {
  {
    std::lock_guard lock(state_->m);
    state_->deadline += more;
  }
  state_->cv.notify_all();
}

void StopSignals::watch(std::shared_ptr<State> state) {
  const sigset_t s = stop_set();
  int sig = 0;
  sigwait(&s, &sig);
  {
    std::lock_guard lock(state->m);
    if (!state->loaded) {
      spdlog::info("stopping (signal {}) while loading", sig);
      spdlog::default_logger()->flush();
      std::_Exit(0);
    }
    state->signal = sig;
    state->deadline = std::chrono::steady_clock::now() + kStopBound;
  }
  state->cv.notify_all();
  std::unique_lock lock(state->m);
  while (std::chrono::steady_clock::now() < state->deadline)
    state->cv.wait_until(lock, state->deadline);
  spdlog::error("the server did not stop in time; exiting");
  spdlog::default_logger()->flush();
  std::_Exit(1);
}

}  // namespace tern::cli
