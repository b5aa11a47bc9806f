// Timeline replot cost for a p=64, m=1024 plan (~200k ops) at full view and zoomed in, the
// memory the view holds, and the time from window creation to a drawn default workspace.
// Offscreen platform; medians over repeated replots are reported as counters (ms, MB).

#include <benchmark/benchmark.h>

#include <QApplication>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "MainWindow.hpp"
#include "SolveController.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"
#include "support/SyntheticPlan.hpp"

namespace {

using namespace pipestudio;

double rssMb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  long resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1024.0 * 1024.0);
}

/// The p=64, m=1024 plan from the real planner (zb-h1 splits backward: ~196k ops), or the
/// hand-timed 1F1B plan of the same size when the planner refuses.
std::shared_ptr<const Plan> bigPlan(std::string* source) {
  static std::shared_ptr<const Plan> cached;
  static std::string cachedSource;
  if (!cached) {
    PlanRequest request;
    Plan synthetic = test::syntheticPlan(64, 1024);
    request.model = synthetic.model;
    request.cluster = synthetic.cluster;
    request.config.schedule = "zb-h1";
    request.config.devices = 64;
    request.config.microbatches = 1024;
    auto plan = makePlan(request);
    if (plan) {
      cached = std::make_shared<const Plan>(std::move(*plan));
      cachedSource = "planner zb-h1";
    } else {
      cached = std::make_shared<const Plan>(std::move(synthetic));
      cachedSource = "synthetic 1f1b (planner: " + plan.message() + ")";
    }
  }
  if (source) *source = cachedSource;
  return cached;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void replot(benchmark::State& state, double zoomFraction) {
  std::string source;
  auto plan = bigPlan(&source);
  const double rssBefore = rssMb();
  auto view = std::make_unique<viz::TimelineView>();
  view->resize(1600, 900);
  view->setPlan(plan);
  if (zoomFraction < 1.0) {
    const QCPRange full = view->visibleRange();
    const double start = full.lower + full.size() * 0.4;
    view->setVisibleRange(start, start + full.size() * zoomFraction);
  }
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  const double viewMb = rssMb() - rssBefore;
  std::vector<double> samples;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    view->plot()->replot(QCustomPlot::rpImmediateRefresh);
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["median_ms"] = median(samples);
  state.counters["ops"] = static_cast<double>(plan->ops.size());
  state.counters["view_mb"] = viewMb;
  state.counters["timeline_data_mb"] = static_cast<double>(view->timeline()->memoryBytes()) / (1024.0 * 1024.0);
  state.counters["rects"] = static_cast<double>(view->plottable()->lastDrawStats().rects);
  state.SetLabel(source);
}

void BM_ReplotFullView(benchmark::State& state) { replot(state, 1.0); }
void BM_ReplotZoomedIn(benchmark::State& state) { replot(state, 0.02); }

void BM_StartToDrawnDefaultWorkspace(benchmark::State& state) {
  std::vector<double> samples;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    gui::MainWindow window;
    window.resize(1600, 1000);
    window.show();
    window.openDefaultWorkspace();
    window.solveController()->waitForIdle(60000);
    window.timelineView()->plot()->replot(QCustomPlot::rpImmediateRefresh);
    QApplication::processEvents();
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["median_ms"] = median(samples);
}

BENCHMARK(BM_ReplotFullView)->Iterations(30)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReplotZoomedIn)->Iterations(30)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StartToDrawnDefaultWorkspace)->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("PipeStudioBench"));
  QApplication::setApplicationName(QStringLiteral("PipeStudioBench"));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
