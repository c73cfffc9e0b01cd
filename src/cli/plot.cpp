// One drawing routine over a small canvas interface, with two canvases: SVG
// written as text (the viewer renders its labels, so it needs no fonts here)
// and PNG rasterised by cairo.
#include "cli/plot.h"

#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace tern::cli {

namespace {

constexpr int kWidth = 720, kHeight = 420;

struct Pt {
  double x, y;
};
struct Rgb {
  int r, g, b;
};
enum class Anchor { start, middle, end };

class Canvas {
 public:
  virtual ~Canvas() = default;
  virtual void polyline(const std::vector<Pt>& pts, Rgb colour, double width, bool dashed) = 0;
  virtual void text(double x, double y, const std::string& s, Anchor anchor) = 0;
  // Writes the picture to path.
  virtual void save(const std::string& path) = 0;
};

std::string xml_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

class SvgCanvas : public Canvas {
 public:
  SvgCanvas() {
    body_ << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << kHeight
          << "' font-family='sans-serif' font-size='12'>\n"
          << "<rect width='100%' height='100%' fill='white'/>\n";
  }
  void polyline(const std::vector<Pt>& pts, Rgb c, double width, bool dashed) override {
    body_ << "<polyline fill='none' stroke='rgb(" << c.r << ',' << c.g << ',' << c.b
          << ")' stroke-width='" << width << "'" << (dashed ? " stroke-dasharray='6,4'" : "")
          << " points='";
    for (const Pt& p : pts) body_ << p.x << ',' << p.y << ' ';
    body_ << "'/>\n";
  }
  void text(double x, double y, const std::string& s, Anchor anchor) override {
    static const char* const kAnchor[] = {"start", "middle", "end"};
    body_ << "<text x='" << x << "' y='" << y << "' text-anchor='" << kAnchor[int(anchor)] << "'>"
          << xml_escaped(s) << "</text>\n";
  }
  void save(const std::string& path) override {
    std::ofstream f(path);
    f << body_.str() << "</svg>\n";
    if (!f.flush()) fail("--plot: cannot write {}", path);
  }

 private:
  std::ostringstream body_;
};

class PngCanvas : public Canvas {
 public:
  PngCanvas()
      : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, kWidth, kHeight),
                 cairo_surface_destroy),
        cr_(cairo_create(surface_.get()), cairo_destroy) {
    cairo_set_source_rgb(cr_.get(), 1, 1, 1);
    cairo_paint(cr_.get());
    cairo_select_font_face(cr_.get(), "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_.get(), 12);
  }
  void polyline(const std::vector<Pt>& pts, Rgb c, double width, bool dashed) override {
    cairo_t* cr = cr_.get();
    cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0);
    cairo_set_line_width(cr, width);
    const double dash[] = {6, 4};
    cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
    for (size_t i = 0; i < pts.size(); ++i)
      (i == 0 ? cairo_move_to : cairo_line_to)(cr, pts[i].x, pts[i].y);
    cairo_stroke(cr);
  }
  void text(double x, double y, const std::string& s, Anchor anchor) override {
    cairo_t* cr = cr_.get();
    cairo_text_extents_t e;
    cairo_text_extents(cr, s.c_str(), &e);
    const double shift = anchor == Anchor::start ? 0 : anchor == Anchor::middle ? 0.5 : 1.0;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_move_to(cr, x - shift * e.x_advance, y);
    cairo_show_text(cr, s.c_str());
  }
  void save(const std::string& path) override {
    cairo_surface_flush(surface_.get());
    if (cairo_status(cr_.get()) != CAIRO_STATUS_SUCCESS)
      fail("--plot: drawing {} failed: {}", path, cairo_status_to_string(cairo_status(cr_.get())));
    const cairo_status_t s = cairo_surface_write_to_png(surface_.get(), path.c_str());
    if (s != CAIRO_STATUS_SUCCESS)
      fail("--plot: cannot write {}: {}", path, cairo_status_to_string(s));
  }

 private:
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface_;
  std::unique_ptr<cairo_t, void (*)(cairo_t*)> cr_;
};

std::string context_label(double c) {
  return c >= 1024 ? std::to_string(int(c / 1024)) + "K" : std::to_string(int(c));
}

void draw(Canvas& cv, std::span<const PlotPoint> pts, const std::string& title,
          const std::string& xlabel) {
  const double L = 70, R = 20, T = 30, B = 50;
  double top = 0;
  for (const PlotPoint& p : pts) top = std::max({top, p.tok_s, p.floor_tok_s});
  // Round ticks: a step of 1, 2 or 5 times a power of ten, about five of them.
  const double raw = std::max(top, 1.0) * 1.05 / 5, mag = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw <= mag       ? mag
                      : raw <= 2 * mag ? 2 * mag
                      : raw <= 5 * mag ? 5 * mag
                                       : 10 * mag;
  const int ticks = int(std::ceil(std::max(top, 1.0) * 1.05 / step));
  const double ymax = ticks * step;
  const double x0 = std::log2(pts.front().context);
  const double x1 = std::max(x0 + 1, std::log2(pts.back().context));
  auto X = [&](double c) { return L + (std::log2(c) - x0) / (x1 - x0) * (kWidth - L - R); };
  auto Y = [&](double y) { return kHeight - B - y / ymax * (kHeight - T - B); };
  const Rgb black{0, 0, 0}, gray{128, 128, 128}, blue{70, 130, 180};
  cv.polyline({{L, T}, {L, kHeight - B}, {kWidth - R, kHeight - B}}, black, 1, false);
  for (int i = 0; i <= ticks; ++i)
    cv.text(L - 6, Y(i * step) + 4, fmt::format("{:g}", i * step), Anchor::end);
  for (const PlotPoint& p : pts)
    cv.text(X(p.context), kHeight - B + 16, context_label(p.context), Anchor::middle);
  auto curve = [&](double PlotPoint::*value) {
    std::vector<Pt> v;
    for (const PlotPoint& p : pts) v.push_back({X(p.context), Y(p.*value)});
    return v;
  };
  cv.polyline(curve(&PlotPoint::floor_tok_s), gray, 2, true);
  cv.polyline(curve(&PlotPoint::tok_s), blue, 2, false);
  cv.text(L + 10, T + 4, title, Anchor::start);
  cv.text((kWidth + L) / 2, kHeight - 10, xlabel, Anchor::middle);
}

}  // namespace

PlotFormat plot_format(const std::string& path) {
  std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (ext == ".svg") return PlotFormat::svg;
  if (ext == ".png") return PlotFormat::png;
  fail("plot file '{}' must end in .svg or .png", path);
}

namespace {

void write_plot(const std::string& path, std::span<const PlotPoint> points,
                const std::string& title, const std::string& xlabel) {
  const PlotFormat format = plot_format(path);
  if (points.empty()) fail("--plot: no results to plot");
  for (const PlotPoint& p : points)
    if (!(p.context > 0) || !std::isfinite(p.tok_s) || !std::isfinite(p.floor_tok_s))
      fail("--plot: context {} has no finite result to plot", p.context);
  std::unique_ptr<Canvas> cv;
  if (format == PlotFormat::svg)
    cv = std::make_unique<SvgCanvas>();
  else
    cv = std::make_unique<PngCanvas>();
  draw(*cv, points, title, xlabel);
  cv->save(path);
}

}  // namespace

void write_decode_plot(const std::string& path, std::span<const PlotPoint> points) {
  write_plot(path, points, "decode tok/s (blue) vs bandwidth floor (gray), by context",
             "context length");
}

void write_prefill_plot(const std::string& path, std::span<const PlotPoint> points) {
  write_plot(path, points, "prefill tok/s (blue) vs FLOP floor at the measured bf16 rate (gray)",
             "prompt length");
}

}  // namespace tern::cli
