// torus tls init DIR: a cluster CA and a join token to give heads and agents (tls/cluster_secrets.h).

#include <ctime>
#include <iostream>

#include "torus/cli/commands.h"
#include "torus/tls/cluster_secrets.h"

namespace torus::cli {

int CmdTlsInit(const std::string& dir) {
  auto files = tls::WriteClusterSecrets(dir, static_cast<int64_t>(time(nullptr)));
  if (!files.ok()) {
    std::cerr << "torus tls init: " << files.status().message() << "\n";
    return files.status().code() == absl::StatusCode::kAlreadyExists ? 1 : 2;
  }
  std::cout << "wrote " << files->ca_cert << ", " << files->ca_key << " (keep it private) and " << files->join_token
            << "\n"
            << "heads:  torus-head --tls-ca " << files->ca_cert << " --tls-ca-key " << files->ca_key
            << " --join-token-file " << files->join_token << " ...\n"
            << "agents: torus-node --tls-ca " << files->ca_cert << " --join-token-file " << files->join_token
            << " ...\n"
            << "GKE:    kubectl -n torus create secret generic torus-tls --from-file=" << files->ca_cert
            << " --from-file=" << files->ca_key << " --from-file=" << files->join_token << "\n";
  return 0;
}

}  // namespace torus::cli
