// gRPC credentials of the cluster's TLS: servers and channels built from the CA, certificate and key files (watched,
// so that a renewed certificate is taken up without a restart), and the identity of a call's peer.
//
// A channel verifies that the server's certificate chains to the cluster CA and states the expected identity (the
// identity is the name checked, not the host dialled: agents and the head are reached by address). A server asks
// for a client certificate and verifies it when one is presented; calls without one (clients holding only the user
// token) come through with no identity, and each handler decides what that may do.
//
// Thread-safety: pure functions; the credentials they return are gRPC's own (thread-safe).
#pragma once

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace torus::tls {

struct TlsFiles {
  std::string ca;    // the cluster CA's certificate (PEM)
  std::string cert;  // this process's certificate; "" for a client with no identity of its own
  std::string key;   // its private key
};

// How often watched files are read again for renewed certificates.
inline constexpr unsigned int kDefaultRefreshSeconds = 60;

// Server credentials: `files.cert`/`files.key` as the server's identity; client certificates requested and verified
// against `files.ca` when presented.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files,
                                                           unsigned int refresh_s = kDefaultRefreshSeconds);

// Channel credentials that accept a server whose certificate chains to `files.ca` and whose identity (common name)
// is `expected_identity`; with `expected_identity` ending in ':' (e.g. "torus-node:"), any identity with that
// prefix; with "", any identity the CA issued (the head or any node). `files.cert`/`files.key`, when set, are presented as this side's identity.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files, const std::string& expected_identity,
                                                             unsigned int refresh_s = kDefaultRefreshSeconds);

// The same from PEM text held in memory (not watched: for many short-lived identities, e.g. a load generator's).
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFromPem(const std::string& ca_pem,
                                                                    const std::string& cert_pem,
                                                                    const std::string& key_pem,
                                                                    const std::string& expected_identity);

// Makes a channel built with `args` ask the server for the name kMemberServerName (pki.h) instead of the host it
// dials: agents and core workers are reached by address, and their certificates name no address. For channels to
// members (the head's certificate names it too); the identity is checked by the credentials.
void NameMembersByIdentity(grpc::ChannelArguments* args);

// The identity (certificate common name) the peer of a call presented and the server verified; "" when the call is
// not over TLS or the peer presented no certificate.
std::string PeerIdentity(const grpc::ServerContextBase* ctx);

}  // namespace torus::tls
