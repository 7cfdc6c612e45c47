"""The kubelet device-plugin API's generated gRPC classes (``scripts/gen_proto.py``), for the kubelet
stand-in and the tests: the device plugin itself serves through generic handlers."""
