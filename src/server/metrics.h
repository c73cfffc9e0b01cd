// The server's Prometheus metrics, in the text exposition format (no client
// library: Debian 12 packages none): counters by label, histograms with
// fixed buckets, gauges read when scraped. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/request.h"

namespace tern::server {

class Metrics {
 public:
  Metrics();
  // An endpoint requests may be counted under; a request to any other path
  // (a refused key on a made-up path, say) is counted under "other".
  void endpoint(const std::string& name);
  void request(const std::string& endpoint, int status);
  // A finished generation's tokens, cache use and latencies.
  void generation(const Result& r);
  // A chat's next turn queued for prefill while idle.
  void idle_prefill();
  // Gauges and counters kept elsewhere, read at each scrape.
  void gauge(const std::string& name, const std::string& help, std::function<double()> read);
  void counter(const std::string& name, const std::string& help, std::function<double()> read);
  // A histogram kept elsewhere: counts per bucket of `bounds` (not cumulative,
  // +Inf last) and the sum of the observations, read at each scrape.
  struct HistogramReading {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    double sum = 0;
  };
  void histogram(const std::string& name, const std::string& help,
                 std::function<HistogramReading()> read);
  std::string render() const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket (not cumulative), +Inf last
    double sum = 0;
    uint64_t n = 0;
    void observe(double x);
  };
  mutable std::mutex m_;
  std::set<std::string> endpoints_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_ = 0, cached_ = 0, completion_ = 0, hits_ = 0, misses_ = 0, idle_prefills_ = 0;
  std::map<std::string, uint64_t> finishes_;  // by finish_name
  Histogram ttft_, token_;
  struct Gauge {
    std::string name, help;
    const char* type;
    std::function<double()> read;
  };
  std::vector<Gauge> gauges_;
  struct ReadHistogram {
    std::string name, help;
    std::function<HistogramReading()> read;
  };
  std::vector<ReadHistogram> histograms_;
};

}  // namespace tern::server
