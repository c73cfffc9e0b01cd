#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace tern::server {

namespace {

// A label value in the text format: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void Metrics::Histogram::observe(double x) {
  const size_t i = size_t(std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin());
  counts[i]++;
  sum += x;
  n++;
}

Metrics::Metrics() {
  ttft_.bounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  token_.bounds = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
  ttft_.counts.assign(ttft_.bounds.size() + 1, 0);
  token_.counts.assign(token_.bounds.size() + 1, 0);
}

void Metrics::endpoint(const std::string& name) {
  std::lock_guard lock(m_);
  endpoints_.insert(name);
}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard lock(m_);
  requests_[{endpoints_.contains(endpoint) ? endpoint : "other", status}]++;
}

void Metrics::idle_prefill() {
  std::lock_guard lock(m_);
  ++idle_prefills_;
}

void Metrics::generation(const Result& r) {
  std::lock_guard lock(m_);
  prompt_ += uint64_t(r.prompt_tokens);
  cached_ += uint64_t(r.cached_tokens);
  completion_ += uint64_t(r.completion_tokens);
  (r.cached_tokens > 0 ? hits_ : misses_)++;
  finishes_[finish_name(r.finish)]++;
  if (r.completion_tokens > 0) ttft_.observe(r.ttft_s);
  for (float g : r.token_gaps) token_.observe(g);
}

void Metrics::gauge(const std::string& name, const std::string& help,
                    std::function<double()> read) {
  std::lock_guard lock(m_);
  gauges_.push_back({name, help, "gauge", std::move(read)});
}

void Metrics::counter(const std::string& name, const std::string& help,
                      std::function<double()> read) {
  std::lock_guard lock(m_);
  gauges_.push_back({name, help, "counter", std::move(read)});
}

void Metrics::histogram(const std::string& name, const std::string& help,
                        std::function<HistogramReading()> read) {
  std::lock_guard lock(m_);
  histograms_.push_back({name, help, std::move(read)});
}

std::string Metrics::render() const {
  std::lock_guard lock(m_);
  std::string out;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, v);
  };
  out +=
      "# HELP tern_requests_total HTTP requests by endpoint and status.\n"
      "# TYPE tern_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("tern_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n",
                       label_value(key.first), key.second, n);
  counter("tern_prompt_tokens_total", "Prompt tokens of finished generations.", prompt_);
  counter("tern_cached_tokens_total", "Prompt tokens served from the session cache.", cached_);
  counter("tern_completion_tokens_total", "Generated tokens.", completion_);
  counter("tern_cache_hits_total", "Generations that reused cached state.", hits_);
  counter("tern_cache_misses_total", "Generations that prefilled the whole prompt.", misses_);
  counter("tern_idle_prefills_total", "Next turns of chats queued for prefill while idle.",
          idle_prefills_);
  out +=
      "# HELP tern_generations_total Finished generations by how they ended.\n"
      "# TYPE tern_generations_total counter\n";
  for (const auto& [finish, n] : finishes_)
    out += fmt::format("tern_generations_total{{finish=\"{}\"}} {}\n", finish, n);
  auto histogram = [&](const std::string& name, const std::string& help, const Histogram& h) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i)
      out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cum += h.counts[i]);
    out += fmt::format("{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {3}\n", name,
                       cum + h.counts.back(), h.sum, h.n);
  };
  histogram("tern_time_to_first_token_seconds", "Request start to its first token.", ttft_);
  histogram("tern_token_latency_seconds", "Time between successive generated tokens.", token_);
  for (const ReadHistogram& r : histograms_) {
    HistogramReading h = r.read();
    Histogram as{std::move(h.bounds), std::move(h.counts), h.sum, 0};
    for (uint64_t c : as.counts) as.n += c;
    histogram(r.name, r.help, as);
  }
  for (const Gauge& g : gauges_)
    out +=
        fmt::format("# HELP {0} {1}\n# TYPE {0} {3}\n{0} {2}\n", g.name, g.help, g.read(), g.type);
  return out;
}

}  // namespace tern::server
