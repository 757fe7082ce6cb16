// Client: the namespace calls of IoQueue's metadata requests in two halves, and the reply
// decoders they share with the synchronous calls (client/namespace.cc, client/client.cc).
#include "client/call_util.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/mount_state.h"

namespace odafs {
namespace {

// Waits for call's reply (IoQueue polled it: it is there, or overdue) and decodes it into
// *res with xres; `what` names the call in a malformed reply's error.
template <class Res>
Status reply_of(const MountState& m, rpc::Call& call, bool_t (*xres)(XDR*, Res*), Res* res,
                const char* what) {
  XDR x;
  ODAFS_RETURN_IF_ERROR(m.channel->wait_until(call, &x, call.deadline()));
  if (!xres(&x, res)) return Status(EPROTO, std::string(what) + ": malformed reply");
  return Status();
}

}  // namespace

Result<std::pair<Handle, Attr>> ClientImpl::lookup_of(const dirop_res& res,
                                                      const std::string& name) {
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "lookup " + name));
  return std::make_pair(get_fh(res.dirop_res_u.ok.fh), to_attr(res.dirop_res_u.ok.attr));
}

Result<int> ClientImpl::granted_of(const access_res& res, int want) {
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "access"));
  return static_cast<int>(res.access_res_u.granted & static_cast<u_int>(want));
}

Result<Attr> ClientImpl::setattr_of(const attr_res& res, const std::string& what) {
  ODAFS_RETURN_IF_ERROR(status_of(res.status, what));
  return to_attr(res.attr_res_u.attr);
}

create_args ClientImpl::create_call_args(const Handle& dir, const std::string& name, mode_t mode,
                                         int flags, int access) {
  create_args args{};
  put_fh(args.dir, dir);
  args.name = const_cast<char*>(name.c_str());
  args.mode = mode & 07777;
  args.how = (flags & O_EXCL) ? ODAFS_CREATE_EXCLUSIVE : ODAFS_CREATE_UNCHECKED;
  args.access = open_access(access);
  return args;
}

Result<std::pair<Handle, Attr>> ClientImpl::opened(const MountState& m, const Handle& dir,
                                                   std::string_view name, int access,
                                                   const open_res& res, const std::string& what) {
  ODAFS_RETURN_IF_ERROR(status_of(res.status, what));
  const open_ok& ok = res.open_res_u.ok;
  std::pair<Handle, Attr> out{get_fh(ok.fh), to_attr(ok.attr)};
  if (ok.delegation != 0) {
    m.delegations->insert(dir, name, out.first, out.second, ok.delegation, ok.lease_ms,
                          ok.delegation_kind == ODAFS_DELEG_WRITE, ok.space_limit);
  } else if (access != O_RDONLY) {
    m.delegations->forget_name(dir, name);  // this client is about to write it
  }
  return out;
}

Status ClientImpl::start_lookup(const MountState& m, rpc::Call& call, const Handle& dir,
                                const std::string& name) {
  const diropargs args = dirop_args(dir, name);
  return start<ODAFSPROC_LOOKUP>(*m.channel, call, args);
}

Result<std::pair<Handle, Attr>> ClientImpl::finish_lookup(const MountState& m, rpc::Call& call,
                                                          const std::string& name) {
  dirop_res res{};
  ODAFS_RETURN_IF_ERROR(reply_of(m, call, xdr_dirop_res, &res, "lookup"));
  return lookup_of(res, name);
}

Status ClientImpl::start_access(const MountState& m, rpc::Call& call, const Handle& fh, int want) {
  access_args args{};
  put_fh(args.fh, fh);
  args.want =
      static_cast<u_int>(want) & (ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE | ODAFS_ACCESS_EXEC);
  return start<ODAFSPROC_ACCESS>(*m.channel, call, args);
}

Result<int> ClientImpl::finish_access(const MountState& m, rpc::Call& call, int want) {
  access_res res{};
  ODAFS_RETURN_IF_ERROR(reply_of(m, call, xdr_access_res, &res, "access"));
  return granted_of(res, want & (ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE | ODAFS_ACCESS_EXEC));
}

Status ClientImpl::start_setattr(const MountState& m, rpc::Call& call, const Handle& fh,
                                 setattr_args& args) {
  put_fh(args.fh, fh);
  return start<ODAFSPROC_SETATTR>(*m.channel, call, args);
}

Result<Attr> ClientImpl::finish_setattr(const MountState& m, rpc::Call& call,
                                        const std::string& what) {
  attr_res res{};
  ODAFS_RETURN_IF_ERROR(reply_of(m, call, xdr_attr_res, &res, "setattr"));
  return setattr_of(res, what);
}

Status ClientImpl::start_create(const MountState& m, rpc::Call& call, const Handle& dir,
                                const std::string& name, mode_t mode, int flags, int access) {
  const create_args args = create_call_args(dir, name, mode, flags, access);
  return start<ODAFSPROC_CREATE>(*m.channel, call, args);
}

Result<std::pair<Handle, Attr>> ClientImpl::finish_create(const MountState& m, rpc::Call& call,
                                                          const Handle& dir,
                                                          const std::string& name, int access,
                                                          const std::string& what) {
  open_res res{};
  ODAFS_RETURN_IF_ERROR(reply_of(m, call, xdr_open_res, &res, "create"));
  return opened(m, dir, name, access, res, what);
}

Status ClientImpl::start_remove(const MountState& m, rpc::Call& call, const Handle& dir,
                                const std::string& name) {
  return start<ODAFSPROC_REMOVE>(*m.channel, call, dirop_args(dir, name));
}

Status ClientImpl::finish_remove(const MountState& m, rpc::Call& call, const std::string& what) {
  stat_res res{};
  ODAFS_RETURN_IF_ERROR(reply_of(m, call, xdr_stat_res, &res, "remove"));
  return status_of(res.status, what);
}

}  // namespace odafs
