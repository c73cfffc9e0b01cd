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
  }
  state->cv.notify_all();
  std::this_thread::sleep_for(kStopBound);
  spdlog::error("the server did not stop within {} s; exiting", kStopBound.count());
  spdlog::default_logger()->flush();
  std::_Exit(1);
}

}  // namespace tern::cli
