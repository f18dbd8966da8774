# The ready image for cluster.yaml's GPU workers: Ray's own worker image with torch's CUDA build and sptune
# (and pykeops) already installed, so a new GPU node pulls one image and takes trials without installing.
# Build it from the repository root and push it where your nodes can pull it (ECR, Docker Hub ...):
#
#   docker build -t <registry>/sptune:2.60.0-py311-cu130 . && docker push <registry>/sptune:2.60.0-py311-cu130
#
# then uncomment the `docker: {worker_image: ...}` line of gpu_worker in cluster.yaml (docs/cluster.md).
# Rebuild after every change to pyproject.toml: until then the workers install as without it (below).

# cluster.yaml's docker.worker_image, the same tag (tests/test_cluster.py checks it): Ray 2.60, Python 3.11,
# CUDA 13.0. Its user is ray (uid 1000, gid 100), its working directory /home/ray, its Python conda's.
FROM rayproject/ray:2.60.0-py311-cu130

# torch's CUDA build for the image's CUDA, the pin and index of cluster.yaml's worker_setup_commands; first,
# so sptune's torch>=2.5 pulls nothing more. Its own layer: a code change does not download it again.
RUN python -m pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130

# sptune where cluster.yaml's file_mounts put the repository, installed as the plain path installs it
# (editable, with pykeops): at run time Ray mounts the checkout `ray up` copied over this directory, so the
# workers run that code, as the head does, and the copy here only provides the dependencies.
COPY --chown=1000:100 . /home/ray/sptune
RUN python -m pip install --no-cache-dir -e "/home/ray/sptune[keops]"

# What cluster.yaml's worker_setup_commands check (`sha256sum --status -c`): the pyproject.toml this image's
# dependencies come from. A checkout with another pyproject.toml fails the check and installs as usual.
RUN sha256sum /home/ray/sptune/pyproject.toml > /home/ray/.sptune-image.sha256
