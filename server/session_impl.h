#pragma once
// SessionImpl: everything a principal can do once authenticated. Every
// request passes SessionState::authorize (the choke point) before anything
// is enqueued or changed.
//
// Threads: the event-loop thread only.

#include <memory>

#include "protocol/tensord.capnp.h"
#include "server/server_state.h"

namespace tensord::server {

class SessionImpl final : public proto::Session::Server {
 public:
  explicit SessionImpl(std::shared_ptr<SessionState> session);
  ~SessionImpl();

 protected:
  kj::Promise<void> whoami(WhoamiContext context) override;
  kj::Promise<void> info(InfoContext context) override;
  kj::Promise<void> listOps(ListOpsContext context) override;
  kj::Promise<void> call(CallContext context) override;  // session_call.cpp
  kj::Promise<void> callBatch(CallBatchContext context) override;  // session_call.cpp
  kj::Promise<void> graphCreate(GraphCreateContext context) override;  // session_graph.cpp
  kj::Promise<void> upload(UploadContext context) override;
  kj::Promise<void> restore(RestoreContext context) override;
  kj::Promise<void> listTensors(ListTensorsContext context) override;
  kj::Promise<void> deleteTensor(DeleteTensorContext context) override;
  kj::Promise<void> adminReload(AdminReloadContext context) override;  // session_admin.cpp
  kj::Promise<void> status(StatusContext context) override;            // session_admin.cpp
  kj::Promise<void> loadFile(LoadFileContext context) override;        // session_files.cpp
  kj::Promise<void> saveFile(SaveFileContext context) override;        // session_files.cpp
  kj::Promise<void> stats(StatsContext context) override;              // session_stats.cpp
  kj::Promise<void> groupCreate(GroupCreateContext context) override;    // session_groups.cpp
  kj::Promise<void> groupList(GroupListContext context) override;        // session_groups.cpp
  kj::Promise<void> groupDelete(GroupDeleteContext context) override;    // session_groups.cpp
  kj::Promise<void> collective(CollectiveContext context) override;      // session_groups.cpp
  kj::Promise<void> groupConnect(GroupConnectContext context) override;  // session_groups.cpp
  kj::Promise<void> kernelAdd(KernelAddContext context) override;        // session_kernels.cpp
  kj::Promise<void> kernelList(KernelListContext context) override;      // session_kernels.cpp
  kj::Promise<void> kernelRemove(KernelRemoveContext context) override;  // session_kernels.cpp
  kj::Promise<void> kernelShow(KernelShowContext context) override;      // session_kernels.cpp

 private:
  std::shared_ptr<SessionState> session_;
};

}  // namespace tensord::server
