#include <gtest/gtest.h>

#ifdef PIPESTUDIO_HAVE_REMOTE

#include <unistd.h>

#include <QAction>
#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QStandardItemModel>
#include <QTemporaryDir>
#include <QTest>

#include "DeployDialog.hpp"
#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SlurmFixture.hpp"
#include "SolveController.hpp"
#include "SshdFixture.hpp"

namespace pipestudio::gui {
namespace {

bool deployWaitUntil(const std::function<bool()>& done, int timeoutMs) {
  QElapsedTimer timer;
  timer.start();
  while (!done() && timer.elapsed() < timeoutMs) QTest::qWait(20);
  return done();
}

bool deployWriteFile(const QString& path, const QByteArray& text) {
  QFile f(path);
  return f.open(QIODevice::WriteOnly) && f.write(text) == text.size();
}

class DeployDialogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pipestudio::testing::qtApp();
    ASSERT_TRUE(m_dir.isValid());
    window = std::make_unique<MainWindow>();
    window->solveController()->setDebounceMs(20);
    ASSERT_TRUE(window->openDefaultWorkspace());
    ASSERT_TRUE(window->solveController()->waitForIdle(60000));
    ASSERT_TRUE(window->currentPlan()) << window->statusText().toStdString();
  }
  /// A hosts file whose one host is 127.0.0.1 on `port` with the plan's GPUs.
  QString hostsFile(int port) const {
    const QString path = m_dir.filePath(QStringLiteral("hosts.json"));
    const QByteArray text =
        QStringLiteral(R"({"schema": "pipestudio.hosts/1", "hosts": [{"host": "127.0.0.1", "port": %1,
      "known_hosts_file": "%2", "gpus": %3, "remote_dir": "%4"}]})")
            .arg(port)
            .arg(m_dir.filePath(QStringLiteral("known_hosts")))
            .arg(window->currentPlan()->config.devices)
            .arg(m_dir.filePath(QStringLiteral("remote")))
            .toUtf8();
    EXPECT_TRUE(deployWriteFile(path, text));
    return path;
  }
  QString historyPath() const { return m_dir.filePath(QStringLiteral("history.sqlite")); }

  QTemporaryDir m_dir;
  std::unique_ptr<MainWindow> window;
};

TEST_F(DeployDialogTest, ActionIsEnabledWithAPlanAndTheDialogWritesThePlan) {
  ASSERT_NE(window->deployAction(), nullptr);
  EXPECT_TRUE(window->deployAction()->isEnabled());
  EXPECT_EQ(window->deployAction()->shortcut(), QKeySequence(Qt::CTRL | Qt::Key_D));
  DeployDialog dialog(window->currentPlan(), QStringLiteral("test"), historyPath());
  ASSERT_FALSE(dialog.planPath().isEmpty()) << dialog.messageLabel()->text().toStdString();
  EXPECT_TRUE(QFile::exists(dialog.planPath()));
  EXPECT_FALSE(dialog.executorEdit()->text().isEmpty());

  DeployDialog noPlan(nullptr, QStringLiteral("none"), historyPath());
  EXPECT_TRUE(noPlan.planPath().isEmpty());
  EXPECT_FALSE(noPlan.messageLabel()->text().isEmpty());
}

TEST_F(DeployDialogTest, LoadsAHostsFileIntoTheTable) {
  DeployDialog dialog(window->currentPlan(), QStringLiteral("test"), historyPath());
  const QString path = m_dir.filePath(QStringLiteral("two.json"));
  ASSERT_TRUE(deployWriteFile(path, R"({"schema": "pipestudio.hosts/1", "hosts": [
      {"host": "node1", "port": 2222, "user": "alice", "gpus": 4},
      {"host": "node2", "gpus": 8, "remote_dir": "/scratch/ps"}]})"));
  ASSERT_TRUE(dialog.loadHostsFile(path)) << dialog.messageLabel()->text().toStdString();
  QStandardItemModel* hosts = dialog.hostsModel();
  ASSERT_EQ(hosts->rowCount(), 2);
  EXPECT_EQ(hosts->item(0, DeployDialog::HostName)->text(), QStringLiteral("node1"));
  EXPECT_EQ(hosts->item(0, DeployDialog::HostPort)->text(), QStringLiteral("2222"));
  EXPECT_EQ(hosts->item(0, DeployDialog::HostUser)->text(), QStringLiteral("alice"));
  EXPECT_EQ(hosts->item(0, DeployDialog::HostGpus)->text(), QStringLiteral("4"));
  EXPECT_EQ(hosts->item(1, DeployDialog::HostName)->text(), QStringLiteral("node2"));
  EXPECT_EQ(hosts->item(1, DeployDialog::HostPort)->text(), QStringLiteral("22"));
  EXPECT_EQ(hosts->item(1, DeployDialog::HostRemoteDir)->text(), QStringLiteral("/scratch/ps"));
  EXPECT_TRUE(dialog.messageLabel()->text().contains(QStringLiteral("12 GPU")))
      << dialog.messageLabel()->text().toStdString();
  EXPECT_TRUE(dialog.jobLabel()->isHidden()) << "no scheduler behind launcher ssh";

  // A broken hosts file empties the table and names the file.
  const QString bad = m_dir.filePath(QStringLiteral("bad.json"));
  ASSERT_TRUE(deployWriteFile(bad, R"({"schema": "pipestudio.hosts/1", "hosts": [{"port": 22}]})"));
  EXPECT_FALSE(dialog.loadHostsFile(bad));
  EXPECT_EQ(dialog.hostsModel()->rowCount(), 0);
  EXPECT_TRUE(dialog.messageLabel()->text().contains(QStringLiteral("bad.json")))
      << dialog.messageLabel()->text().toStdString();
}

TEST_F(DeployDialogTest, DeployToARefusingHostEndsWithAnErrorNotAHang) {
  const int port = remote::test::freeTcpPort();
  ASSERT_GT(port, 0);
  DeployDialog dialog(window->currentPlan(), QStringLiteral("test"), historyPath());
  ASSERT_TRUE(dialog.loadHostsFile(hostsFile(port))) << dialog.messageLabel()->text().toStdString();
  dialog.backendCombo()->setCurrentText(QStringLiteral("cpu"));
  // Any existing executable passes the request check; the connection fails before upload.
  dialog.executorEdit()->setText(QStringLiteral(PIPESTUDIO_GUI_BINARY));
  dialog.show();

  dialog.testConnection();
  EXPECT_TRUE(dialog.busy());
  ASSERT_TRUE(deployWaitUntil([&] { return !dialog.busy(); }, 15000)) << "test connection did not end";
  const QString testMessage = dialog.messageLabel()->text();
  EXPECT_TRUE(testMessage.contains(QStringLiteral("127.0.0.1"))) << testMessage.toStdString();
  EXPECT_TRUE(dialog.hostsModel()->item(0, DeployDialog::HostFingerprint)->text().isEmpty());

  dialog.deploy();
  EXPECT_TRUE(dialog.busy());
  ASSERT_TRUE(deployWaitUntil([&] { return !dialog.busy(); }, 15000)) << "deploy did not end";
  const QString message = dialog.messageLabel()->text();
  EXPECT_TRUE(message.startsWith(QStringLiteral("Deploy failed"))) << message.toStdString();
  EXPECT_TRUE(message.contains(QStringLiteral("127.0.0.1"))) << message.toStdString();
  EXPECT_TRUE(dialog.messageLabel()->isVisible());
  EXPECT_EQ(dialog.lastRun(), 0);  // refused before any rank started: nothing recorded
}

TEST_F(DeployDialogTest, ClosingDuringADeployDropsLateReports) {
  const int port = remote::test::freeTcpPort();
  ASSERT_GT(port, 0);
  const QString hosts = hostsFile(port);
  {
    auto dialog = std::make_unique<DeployDialog>(window->currentPlan(), QStringLiteral("test"), historyPath());
    ASSERT_TRUE(dialog->loadHostsFile(hosts));
    dialog->backendCombo()->setCurrentText(QStringLiteral("cpu"));
    dialog->executorEdit()->setText(QStringLiteral(PIPESTUDIO_GUI_BINARY));
    dialog->deploy();
    EXPECT_TRUE(dialog->busy());
    // Destroyed while the worker runs: the destructor cancels and joins; the worker's queued
    // result finds the QPointer null.
  }
  QTest::qWait(50);
  SUCCEED();
}

TEST_F(DeployDialogTest, SlurmJobStateIsShownWithSlurmsReason) {
  // A real single-node Slurm behind a real sshd; the job asks for more CPUs than the node
  // has, so Slurm holds it PENDING (PartitionConfig) and the dialog must say so, then give up.
  remote::test::Slurm slurm(4);
  if (!slurm.running()) GTEST_SKIP() << "Slurm cannot start here: " << slurm.error();
  remote::test::Sshd sshd({"SLURM_CONF=" + slurm.conf()});
  if (!sshd.running()) GTEST_SKIP() << "sshd cannot start here: " << sshd.error();
  const HostEntry h = sshd.hostEntry(1);
  const QString hosts = m_dir.filePath(QStringLiteral("slurm-hosts.json"));
  ASSERT_TRUE(
      deployWriteFile(hosts, QStringLiteral(R"({"schema": "pipestudio.hosts/1", "launcher": "slurm",
      "slurm": {"partition": "debug", "extra_args": ["--cpus-per-task=64"]},
      "hosts": [{"host": "127.0.0.1", "port": %1, "identity_file": "%2", "known_hosts_file": "%3", "gpus": 1,
                 "remote_dir": "%4"}]})")
                                 .arg(h.port)
                                 .arg(QString::fromStdString(h.identityFile), QString::fromStdString(h.knownHostsFile),
                                      m_dir.filePath(QStringLiteral("slurm-remote")))
                                 .toUtf8()));
  DeployDialog dialog(window->currentPlan(), QStringLiteral("test"), historyPath());
  ASSERT_TRUE(dialog.loadHostsFile(hosts)) << dialog.messageLabel()->text().toStdString();
  EXPECT_FALSE(dialog.jobLabel()->isHidden());
  EXPECT_EQ(dialog.jobLabel()->text(), QStringLiteral("Slurm job: not submitted"));
  dialog.backendCombo()->setCurrentText(QStringLiteral("cpu"));
  dialog.executorEdit()->setText(QStringLiteral(PIPESTUDIO_BINARY_DIR "/executor/pipestudio-exec"));
  dialog.show();
  dialog.deploy();
  QStringList seen;
  ASSERT_TRUE(deployWaitUntil(
      [&] {
        const QString text = dialog.jobLabel()->text();
        if (seen.isEmpty() || seen.back() != text) seen << text;
        return !dialog.busy();
      },
      60000))
      << "deploy did not end";
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const QString& t) {
    return t.contains(QStringLiteral(": PENDING (PartitionConfig)"));
  })) << seen.join(QStringLiteral(" | ")).toStdString();
  EXPECT_TRUE(dialog.jobLabel()->text().startsWith(QStringLiteral("slurm job ")))
      << dialog.jobLabel()->text().toStdString();
  const QString message = dialog.messageLabel()->text();
  EXPECT_TRUE(message.contains(QStringLiteral("cannot be scheduled: PENDING (PartitionConfig)")))
      << message.toStdString();
  EXPECT_NE(dialog.lastRun(), 0) << "the refused job is recorded as a failed run";
  // srun's own words are in the log, marked as the launcher's.
  EXPECT_TRUE(dialog.logView()->toPlainText().contains(QStringLiteral("[launcher] srun: ")))
      << dialog.logView()->toPlainText().toStdString();
}

}  // namespace
}  // namespace pipestudio::gui

#endif  // PIPESTUDIO_HAVE_REMOTE
