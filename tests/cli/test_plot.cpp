// tern bench's plot: both formats drawn from the same points, read back and
// checked where the curves must be; bad paths and points refused by name.
#include <cairo.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include "cli/plot.h"
#include "core/error.h"
#include "test_util.h"

namespace tern::cli {
namespace {

// A sweep shaped like the H200's: tok/s falling with context, below the floor.
std::vector<PlotPoint> sweep() {
  std::vector<PlotPoint> v;
  for (double c = 256, t = 930, f = 2350; c <= 131072; c *= 2, t *= 0.93, f *= 0.87)
    v.push_back({c, t, f});
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The polyline whose stroke is `colour`, as its points.
std::vector<std::pair<double, double>> svg_points(const std::string& svg,
                                                  const std::string& colour) {
  const std::regex line("<polyline[^>]*stroke='" + colour + "'[^>]*points='([^']*)'");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(svg, m, line)) << colour;
  std::vector<std::pair<double, double>> pts;
  std::stringstream ss(m[1].str());
  double x, y;
  char comma;
  while (ss >> x >> comma >> y) pts.push_back({x, y});
  return pts;
}

TEST(Plot, SvgCurvesFollowThePoints) {
  const auto pts = sweep();
  const std::string path = test::scratch_dir("plot_svg") + "/decode.SVG";
  write_decode_plot(path, pts);
  const std::string svg = slurp(path);
  ASSERT_NE(svg.find("</svg>"), std::string::npos);
  const auto tok = svg_points(svg, "rgb\\(70,130,180\\)"),
             floor = svg_points(svg, "rgb\\(128,128,128\\)");
  ASSERT_EQ(tok.size(), pts.size());
  ASSERT_EQ(floor.size(), pts.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i > 0) {
      // log2 axis: every doubling of the context is the same step right.
      EXPECT_NEAR(tok[i].first - tok[i - 1].first, tok[1].first - tok[0].first, 1e-3);
      EXPECT_GT(tok[i].second, tok[i - 1].second);  // fewer tok/s: lower (larger y)
    }
    EXPECT_LT(floor[i].second, tok[i].second);  // the floor is above the measured speed
  }
  // Round ticks up to the top of the floor (2350): 0, 500, ... 2500.
  for (const char* label :
       {">256<", ">4K<", ">128K<", ">context length<", ">0<", ">500<", ">2500<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(svg.find(">3000<"), std::string::npos);
}

TEST(Plot, PngHasTheCurvesWhereTheSvgHasThem) {
  const auto pts = sweep();
  const std::string dir = test::scratch_dir("plot_png");
  write_decode_plot(dir + "/decode.svg", pts);
  write_decode_plot(dir + "/decode.png", pts);
  const auto tok = svg_points(slurp(dir + "/decode.svg"), "rgb\\(70,130,180\\)");
  cairo_surface_t* s = cairo_image_surface_create_from_png((dir + "/decode.png").c_str());
  ASSERT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  const int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  EXPECT_EQ(w, 720);
  EXPECT_EQ(h, 420);
  const unsigned char* px = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  auto rgb = [&](int x, int y) {  // cairo's native-endian xRGB words
    const uint32_t v = reinterpret_cast<const uint32_t*>(px + size_t(y) * stride)[x];
    return std::array<int, 3>{int(v >> 16 & 255), int(v >> 8 & 255), int(v & 255)};
  };
  auto bluish = [](std::array<int, 3> c) { return c[2] > c[0] + 60; };
  // The corner is background; each tok/s point of the SVG has the blue line
  // within a pixel of it in the PNG.
  EXPECT_EQ(rgb(w - 2, 2), (std::array<int, 3>{255, 255, 255}));
  int blue = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) blue += bluish(rgb(x, y));
  EXPECT_GT(blue, 600);  // a 2-pixel line across ~630 pixels
  for (const auto& [x, y] : tok) {
    bool near = false;
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) near |= bluish(rgb(int(x) + dx, int(y) + dy));
    EXPECT_TRUE(near) << "no line at " << x << "," << y;
  }
  // Text was drawn (the axis labels are dark pixels left of the axis).
  int dark = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < 60; ++x) dark += rgb(x, y)[0] < 100;
  EXPECT_GT(dark, 20);
  cairo_surface_destroy(s);
}

TEST(Plot, OnePointIsDrawn) {
  const std::string path = test::scratch_dir("plot_one") + "/one.svg";
  const PlotPoint p{4096, 917, 2250};
  write_decode_plot(path, {&p, 1});
  EXPECT_EQ(svg_points(slurp(path), "rgb\\(70,130,180\\)").size(), 1u);
}

TEST(Plot, RefusesBadPathsAndPoints) {
  const auto pts = sweep();
  auto message = [&](const std::string& path, std::span<const PlotPoint> p) {
    try {
      write_decode_plot(path, p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string dir = test::scratch_dir("plot_bad");
  EXPECT_NE(
      message(dir + "/p.jpg", pts).find("plot file '" + dir + "/p.jpg' must end in .svg or .png"),
      std::string::npos);
  EXPECT_NE(message("png", pts).find("must end in .svg or .png"), std::string::npos);
  EXPECT_NE(message(dir + "/missing/p.png", pts).find("cannot write"), std::string::npos);
  EXPECT_NE(message(dir + "/missing/p.svg", pts).find("cannot write"), std::string::npos);
  EXPECT_NE(message(dir + "/p.svg", {}).find("no results"), std::string::npos);
  const PlotPoint nan{1024, std::nan(""), 2000};
  EXPECT_NE(message(dir + "/p.svg", {&nan, 1}).find("context 1024 has no finite result"),
            std::string::npos);
  EXPECT_EQ(plot_format("A.PnG"), PlotFormat::png);
}

}  // namespace
}  // namespace tern::cli
