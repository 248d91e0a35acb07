"""One local Spark session per test module, with Spark's Kafka connector from Maven on its classpath.

pyspark is pinned (pyproject.toml) to the Spark release whose connector Maven resolves with the same version
(compat-tests/java/pom.xml, jar set `spark`); the connector and its dependencies reach Spark as `spark.jars`,
less the jars pyspark already ships. A user would write `--packages
org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0` (or set `spark.jars.packages`) instead.
Without a JDK, pyspark or the jars a test skips locally and fails under CI.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import maven_jars
from java_harness import unavailable

try:
    import pyspark
except ImportError:  # the tests skip (or fail under CI), so the matrix still lists the pyspark scenarios
    pyspark = None


def _artifact(jar: Path) -> str:
    """`scala-library` of scala-library-2.13.15.jar: the name without its version."""
    return re.sub(r"-\d+(\.\d+)+.*$", "", jar.name.removesuffix(".jar"))


def connector_jars() -> list[Path]:
    """The connector's runtime jars from Maven, less the artifacts pyspark ships itself (scala-library,
    hadoop-client-*, slf4j-api, ...): two versions of one class on a classpath is a bug waiting to happen."""
    shipped = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [jar for jar in maven_jars.jars("spark") if _artifact(jar) not in shipped]


@contextmanager
def local_session(app_name: str) -> Iterator:
    """A local[2] Spark session on loopback with the Kafka connector, stopped on leaving the block."""
    if pyspark is None:
        unavailable("pyspark is not installed: pip install 'kbroker[spark]'")
    if shutil.which("java") is None:
        unavailable("no java on PATH: Spark needs a JDK (17 for pyspark 4.x)")
    try:
        jars = connector_jars()
    except maven_jars.JarsUnavailable as error:
        unavailable(f"Spark's Kafka connector jars: {error}")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.jars", ",".join(map(str, jars)))
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()
