# The config files: each stage instance's own, holding what bdsgd.config.stages.STAGE_READS declares its
# command reads (common.smk: config_slice), and the whole resolved config, for the record.


rule resolved_config:
    localrule: True
    output:
        PATHS.config(),
    log:
        PATHS.config_log(),
    params:
        text=yaml.safe_dump(config, sort_keys=True),
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "printf '%s' {params.text:q} > {output} 2> {log}"


rule stage_config:
    localrule: True
    output:
        PATHS.stage_config(),
    log:
        PATHS.config_log("{stage}"),
    params:
        text=lambda wc: config_slice(wc.stage, wc.name),
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "printf '%s' {params.text:q} > {output} 2> {log}"
