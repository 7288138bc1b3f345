"""Campaign Board runner sidecar: runs trials on a GPU node and streams their logs."""
