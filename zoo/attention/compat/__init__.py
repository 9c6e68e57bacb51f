"""What keeps stored models loading: the attention of checkpoints and folders of earlier
versions, rebuilt into today's layers (:mod:`.legacy`)."""
