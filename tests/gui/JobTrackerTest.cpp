// JobTracker, the one way GUI code runs background work: jobs run off the GUI thread, results
// arrive on it, and a job superseded by a newer one of its kind has its result dropped.
#include <gtest/gtest.h>

#include <QObject>
#include <QThread>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "JobTracker.hpp"
#include "QtTestApp.hpp"

namespace pipestudio::gui {
namespace {

TEST(JobTracker, RunsOffTheGuiThreadAndDeliversOnIt) {
  pipestudio::testing::qtApp();
  QObject context;
  JobTracker tracker(&context);
  QThread* jobThread = nullptr;
  QThread* doneThread = nullptr;
  int result = 0;
  tracker.start(
      [&jobThread](const JobTracker::Control&) {
        jobThread = QThread::currentThread();
        return 42;
      },
      [&](int value) {
        doneThread = QThread::currentThread();
        result = value;
      });
  EXPECT_EQ(result, 0) << "the result arrives through the event loop, never inside start()";
  ASSERT_TRUE(tracker.waitForIdle(10000));
  EXPECT_EQ(result, 42);
  EXPECT_NE(jobThread, nullptr);
  EXPECT_NE(jobThread, QThread::currentThread());
  EXPECT_EQ(doneThread, QThread::currentThread());
}

TEST(JobTracker, SupersededJobIsCancelledAndItsResultDropped) {
  pipestudio::testing::qtApp();
  QObject context;
  JobTracker tracker(&context);
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  auto firstSawCancel = std::make_shared<std::atomic<bool>>(false);
  std::vector<int> delivered;
  const quint64 first = tracker.start(
      [released, firstSawCancel](const JobTracker::Control& job) {
        released.wait();  // still running when the second job starts
        job.post([]() { ADD_FAILURE() << "a stale job's post was delivered"; });
        firstSawCancel->store(job.cancelled());
        return 1;
      },
      [&delivered](int value) { delivered.push_back(value); });
  const quint64 second = tracker.start(
      [](const JobTracker::Control& job) {
        job.post([]() {});
        return 2;
      },
      [&delivered](int value) { delivered.push_back(value); });
  EXPECT_GT(second, first);
  release->set_value();
  ASSERT_TRUE(tracker.waitForIdle(10000));
  EXPECT_EQ(delivered, std::vector<int>{2});
  EXPECT_TRUE(firstSawCancel->load()) << "the superseded job's cancel flag was not raised";
}

TEST(JobTracker, InvalidateDropsEveryPendingResult) {
  pipestudio::testing::qtApp();
  QObject context;
  JobTracker tracker(&context);
  int delivered = 0;
  tracker.start([](const JobTracker::Control&) { return 1; }, [&delivered](int) { ++delivered; });
  tracker.invalidate();
  ASSERT_TRUE(tracker.waitForIdle(10000));
  EXPECT_EQ(delivered, 0);
}

TEST(JobTracker, NothingArrivesAfterTheTrackerIsGone) {
  pipestudio::testing::qtApp();
  QObject context;
  auto delivered = std::make_shared<int>(0);
  {
    JobTracker tracker(&context);
    tracker.start(
        [](const JobTracker::Control& job) {
          while (!job.cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          return 1;
        },
        [delivered](int) { ++*delivered; });
  }  // the destructor cancels the job and waits for it
  QCoreApplication::processEvents();
  EXPECT_EQ(*delivered, 0);
}

}  // namespace
}  // namespace pipestudio::gui
