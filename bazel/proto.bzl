"""cc_grpc_proto: protoc + grpc_cpp_plugin from Debian, as a genrule.

The calling package's directory is the import root: in proto/BUILD,
`tpserve/v1/x.proto` is imported as "tpserve/v1/x.proto" and its header is included as
"tpserve/v1/x.pb.h". A proto that imports others lists them in proto_deps (files,
so that protoc can read them) and their cc_grpc_proto targets in deps (for linking).
"""

# Every generated .grpc.pb.h includes this at its end: tpserve's SerializationTraits
# specialization, which must be the same in every translation unit that sees a service
# or its stubs (it names the invalid-UTF-8 field of a request that fails to parse).
_GRPC_HEADER_EXTENSION = "tpserve/v1/request_utf8.h"
_GRPC_EXTENSION_TARGET = "//proto:request_utf8"

def cc_grpc_proto(name, src, proto_deps = [], grpc = True, deps = [], extra_grpc_header = None,
                  **kwargs):
    """extra_grpc_header: another header of this package that the generated .grpc.pb.h
    includes at its end (after the common extension)."""
    appended = [_GRPC_HEADER_EXTENSION] + ([extra_grpc_header] if extra_grpc_header else [])
    root = native.package_name() or "."
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    plugin = ""
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        plugin = (" --grpc_out=$(GENDIR)/" + root +
                  " --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin")
    native.genrule(
        name = name + "_gen",
        srcs = [src] + proto_deps,
        outs = outs,
        cmd = ("/usr/bin/protoc -I" + root + " --cpp_out=$(GENDIR)/" + root + plugin +
               " $(location " + src + ")" +
               "".join([(" && echo '#include \"" + h + "\"' >> $(GENDIR)/" + root + "/" + base +
                         ".grpc.pb.h") for h in (appended if grpc else [])])),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")] +
               ([extra_grpc_header] if extra_grpc_header else []),
        includes = ["."],
        deps = deps + ["//third_party:protobuf"] +
               (["//third_party:grpc", _GRPC_EXTENSION_TARGET] if grpc else []),
        **kwargs
    )
