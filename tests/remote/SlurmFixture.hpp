#pragma once
// A real single-node Slurm on 127.0.0.1 for the launcher tests (issue 17): munged with a
// generated key, slurmctld and slurmd from Debian's packages with a private slurm.conf
// (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, one node with `cpus` CPUs) and
// private state, spool, log and socket paths under a temp dir, on free ports. Everything it
// started (daemons, job steps, their tasks) is stopped when it goes away. Tests skip (with the
// reason) only when the daemons cannot start here.

#include <sys/types.h>

#include <string>
#include <vector>

namespace pipestudio::remote::test {

class Slurm {
 public:
  explicit Slurm(int cpus = 4);
  ~Slurm();
  Slurm(const Slurm&) = delete;
  Slurm& operator=(const Slurm&) = delete;

  bool running() const { return m_error.empty(); }
  const std::string& error() const { return m_error; }
  const std::string& dir() const { return m_dir; }
  /// The slurm.conf clients need (SLURM_CONF=…).
  std::string conf() const { return m_dir + "/slurm.conf"; }
  const std::string& nodeName() const { return m_node; }

  /// Runs a Slurm client command (squeue, scontrol, sbatch …) against this controller.
  int client(const std::string& command, std::string* out = nullptr) const;
  /// `squeue -h` lines for jobs named `jobName` in the default states (pending, running,
  /// completing …): empty when no such job is left.
  std::string queued(const std::string& jobName) const;
  /// Waits up to `timeoutMs` until no job named `jobName` is queued.
  bool waitUntilGone(const std::string& jobName, int timeoutMs) const;

 private:
  pid_t spawn(const std::vector<std::string>& argv, const std::string& log);
  void writeConf(int cpus, int ctldPort, int slurmdPort, const std::string& mungeSocket) const;
  void stop();
  std::string logs() const;

  std::string m_dir;
  std::string m_error;
  std::string m_node = "psnode";
  std::vector<pid_t> m_daemons;  // munged, slurmctld, slurmd: stopped in reverse order
};

}  // namespace pipestudio::remote::test
