// tern bench's plot: decode tok/s and the bandwidth floor against context
// length (log2 axis), as SVG or PNG.
#pragma once

#include <span>
#include <string>

namespace tern::cli {

struct PlotPoint {
  double context = 0, tok_s = 0, floor_tok_s = 0;
};

enum class PlotFormat { svg, png };

// The format a path's extension names (.svg or .png, any case); fails naming
// the path otherwise, so a bad --plot is refused before the benchmark runs.
PlotFormat plot_format(const std::string& path);

// Writes the plot of `points` (at least one, by increasing context) to path.
void write_decode_plot(const std::string& path, std::span<const PlotPoint> points);
// The same for prefill: tok/s and the FLOP floor against prompt length.
void write_prefill_plot(const std::string& path, std::span<const PlotPoint> points);

}  // namespace tern::cli
