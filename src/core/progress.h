// Progress of a long job counted in bytes (loading or writing a checkpoint):
// on a terminal a bar on stderr with bytes, rate and ETA, redrawn a few times
// a second; otherwise a plain log line every 10% (or 10 s). Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace tern {

class Progress {
 public:
  Progress(std::string what, size_t total);
  ~Progress();
  void add(size_t bytes);
  void finish();

 private:
  void draw(bool last);
  std::string what_;
  size_t total_, done_ = 0;
  bool tty_, finished_ = false;
  int logged_tenth_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_, last_log_;
  std::mutex m_;
};

}  // namespace tern
