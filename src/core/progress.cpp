#include "core/progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

namespace tern {

namespace {
std::string gb(size_t b) {
  return fmt::format("{:.2f} GB", double(b) / 1e9);
}
}  // namespace

Progress::Progress(std::string what, size_t total)
    : what_(std::move(what)),
      total_(total),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_),
      last_log_(start_) {}

Progress::~Progress() {
  finish();
}

void Progress::add(size_t bytes) {
  std::lock_guard lock(m_);
  done_ += bytes;
  draw(false);
}

void Progress::finish() {
  std::lock_guard lock(m_);
  if (finished_) return;
  finished_ = true;
  draw(true);
}

void Progress::draw(bool last) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - start_).count();
  const double frac = total_ ? std::min(1.0, double(done_) / double(total_)) : 1.0;
  const double rate = s > 0 ? double(done_) / s : 0;
  const double eta = rate > 0 ? double(total_ - std::min(done_, total_)) / rate : 0;
  if (tty_) {
    if (!last && now - last_draw_ < std::chrono::milliseconds(200)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int fill = int(frac * kWidth);
    std::fprintf(stderr, "\r%s [%s%s] %s / %s  %.0f MB/s  ETA %.0f s   ", what_.c_str(),
                 std::string(size_t(fill), '#').c_str(),
                 std::string(size_t(kWidth - fill), ' ').c_str(), gb(done_).c_str(),
                 gb(total_).c_str(), rate / 1e6, eta);
    if (last) std::fputc('\n', stderr);
    std::fflush(stderr);
    return;
  }
  const int tenth = int(frac * 10);
  if ((last && logged_tenth_ < 10) || tenth > logged_tenth_ ||
      now - last_log_ > std::chrono::seconds(10)) {
    logged_tenth_ = tenth;
    last_log_ = now;
    spdlog::info("{}: {} of {} ({:.0f}%), {:.0f} MB/s, ETA {:.0f} s", what_, gb(done_), gb(total_),
                 frac * 100, rate / 1e6, eta);
  }
}

}  // namespace tern
